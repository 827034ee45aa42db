"""Each spec field is declared once (its ``Option``): the checks, the command line's flags, the
launch form and ``init``'s template are made from that one declaration, and agree with it."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from torchdeck.backends.errors import SpecError
from torchdeck.backends.spec import (
    NESTED,
    JobSpec,
    option_at,
    spec_from_dict,
    spec_options,
    spec_template,
)
from torchdeck.cli.jobs import spec_for
from torchdeck.cli.main import build_parser
from torchdeck.settings import Settings

EXAMPLE_VALUES = {"int": "3", "text": "x", "choice": None, "bool": None}
"""A value each kind of flag takes on the command line (a choice takes its last choice)."""


def test_every_field_of_the_spec_is_an_option_or_a_section_of_them() -> None:
    for cls in (JobSpec, *NESTED.values()):
        for f in dataclasses.fields(cls):
            assert "option" in f.metadata or f.name in NESTED, f"{cls.__name__}.{f.name} has no Option"
    paths = [o.path for o in spec_options()]
    assert len(paths) == len(set(paths)) and "trainer.epochs" in paths and "cluster.queue" in paths


def test_every_flag_sets_its_own_field_and_nothing_else(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    parser = build_parser()
    flagged = [o for o in spec_options() if o.option.flag]
    assert len({o.name for o in flagged}) == len(flagged), "two flags would share one argparse dest"
    default = spec_from_dict({}).to_dict()
    for opt in flagged:
        expected: object
        if opt.widget == "bool":
            argv, expected = [opt.option.flag], True
        elif opt.widget == "choice":
            value = opt.option.choices[-1]
            argv, expected = [opt.option.flag, value], value
        elif opt.widget == "int":
            argv, expected = [opt.option.flag, "3"], 3
        else:
            samples = {
                "image": "registry.example/team/train:1",
                "local_image": "train:1",
                "entrypoint.module": "pkg.train",
            }
            text = samples.get(opt.path, "ns-1" if opt.path == "namespace" else "job-1" if opt.path == "name" else "x")
            argv, expected = [opt.option.flag, text], text
        args = parser.parse_args(["train", *argv])
        spec = spec_for(args, Settings(state_dir=tmp_path / "state", spec_file=tmp_path / "none.yaml"))
        got = spec.to_dict()
        section, _, name = opt.path.rpartition(".")
        if opt.option.local_path:
            expected = str(tmp_path / str(expected))
        assert (got[section] if section else got)[name] == expected, opt.path
        changed = {
            f"{k}.{s}" if isinstance(v, dict) and k in NESTED else k
            for k, v in got.items()
            for s in (v if isinstance(v, dict) and k in NESTED else [None])
            if (got[k][s] if s else got[k]) != (default[k][s] if s else default[k])
        }
        assert changed <= {opt.path, "name", "entrypoint.code", "entrypoint.module"}, (opt.path, changed)


def test_a_bad_flag_value_is_refused_by_its_fields_own_check(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["train", "--kind", "cronjob"])
    with pytest.raises(SpecError) as err:
        spec_for(args, Settings(state_dir=tmp_path / "state", spec_file=tmp_path / "none.yaml"))
    assert err.value.field == "cluster.kind" and "pytorchjob" in err.value.reason
    assert option_at("cluster.kind").option.check("cronjob") == err.value.reason


printable = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)


@settings(max_examples=60, deadline=None)
@given(
    args=st.lists(printable, max_size=4),
    env=st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), printable, max_size=3),
)
def test_the_commented_template_reads_back_as_the_same_spec(args, env) -> None:
    spec = JobSpec(env=env)
    spec.entrypoint.args = args
    text = spec_template(spec)
    assert spec_from_dict(yaml.safe_load(text)) == spec
    for opt in spec_options():  # each field's line carries its help
        assert f"{opt.name}: " in text and opt.option.help in text


def test_option_takes_exactly_the_fields_of_an_option_as_its_keywords() -> None:
    """``option()``'s keywords are typed (``OptionFacts``) apart from ``Option``: the same names."""
    from torchdeck.backends.spec_options import Option, OptionFacts

    assert set(OptionFacts.__annotations__) == {f.name for f in dataclasses.fields(Option)}
