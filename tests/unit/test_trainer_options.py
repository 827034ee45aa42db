"""The built-in trainer's options are declared once (trainer/options.py): the trainer's argparse,
the launchers' command line (``trainer_arguments``) and the job spec's trainer fields are made
from that one table, and agree on names, defaults and choices."""

from __future__ import annotations

import argparse

import pytest

from torchdeck.backends.errors import SpecError
from torchdeck.backends.spec import JobSpec, SpecOption, spec_options, trainer_arguments, value_at, with_overrides
from torchdeck.trainer.options import TRAINER_OPTIONS, TrainerOption, command_line
from torchdeck.trainer.train import argument_parser, parse_args

LAUNCHER_PATHS = {"data_dir", "checkpoint_dir", "metrics_file"}
"""Given by the launcher as the ranks see them (a run folder here, a volume in a pod), not by a field."""
HIDDEN = {"synthetic_size"}
"""A test's knob: not in the trainer's --help, nor in the spec."""


@pytest.fixture
def flags(monkeypatch) -> dict[str, argparse.Action]:
    """The trainer's own parser's options by dest, as it builds them."""
    monkeypatch.delenv("TORCHDECK_DATA_DIR", raising=False)
    return {a.dest: a for a in argument_parser()._actions if a.dest != "help"}


def fed_fields() -> dict[str, SpecOption]:
    """The spec's fields that the trainer takes, by the trainer option's name."""
    return {o.option.trainer: o for o in spec_options() if o.option.trainer}


def test_the_trainers_parser_is_its_table(flags) -> None:
    assert list(flags) == [opt.name for opt in TRAINER_OPTIONS]
    for opt in TRAINER_OPTIONS:
        action = flags[opt.name]
        assert action.option_strings == [opt.flag]
        assert action.default == opt.default, opt.name
        assert tuple(action.choices or ()) == opt.choices, opt.name
        assert (action.help == argparse.SUPPRESS) == (opt.name in HIDDEN)


def test_the_specs_trainer_fields_are_the_trainers_options_with_its_defaults_and_choices(flags) -> None:
    fed = fed_fields()
    assert set(fed) | LAUNCHER_PATHS | HIDDEN == set(flags)
    assert not set(fed) & (LAUNCHER_PATHS | HIDDEN)
    every_trainer_field = {o.path for o in spec_options() if o.path.startswith("trainer.")}
    assert every_trainer_field <= {o.path for o in fed.values()}
    assert {o.path for o in fed.values()} - every_trainer_field == {"device", "download", "model_file"}
    for name, field in fed.items():
        assert field.default == flags[name].default, name
        assert field.option.choices == tuple(flags[name].choices or ()), name
        assert field.optional == (field.default is None), name


def every_trainer_field_set() -> JobSpec:
    """A spec whose every trainer field is off its default (the last choice, a number above the
    lowest, True), so that each must reach the trainer to be read back."""
    changes: dict[str, object] = {}
    for field in fed_fields().values():
        if field.option.choices:
            changes[field.path] = field.option.choices[-1]
        elif field.widget == "bool":
            changes[field.path] = True
        elif field.widget == "int":
            changes[field.path] = (field.default or 1) + 2
        else:
            changes[field.path] = "s3://bucket/model.pt"
    return with_overrides(JobSpec(), changes)


@pytest.mark.parametrize("spec", [JobSpec(), every_trainer_field_set()], ids=["defaults", "every-field-set"])
def test_trainer_arguments_are_read_back_by_the_trainer_as_the_spec_says(spec) -> None:
    argv = trainer_arguments(spec, "/data", "/ckpt", "/metrics.jsonl")
    read = argument_parser().parse_args(argv)
    for name, field in fed_fields().items():
        assert getattr(read, name) == value_at(spec, field.path), name
    assert (read.data_dir, read.checkpoint_dir, read.metrics_file) == ("/data", "/ckpt", "/metrics.jsonl")
    parse_args(argv)  # and its own checks take them
    if spec != JobSpec():
        assert {a for a in argv if a.startswith("--")} == {o.flag for o in TRAINER_OPTIONS if o.name not in HIDDEN}


@pytest.mark.parametrize("opt", [o for o in TRAINER_OPTIONS if o.minimum is not None], ids=lambda o: o.name)
def test_the_trainer_and_the_spec_refuse_the_same_numbers(opt: TrainerOption[object], capsys) -> None:
    low = opt.minimum
    assert low is not None
    parse_args([opt.flag, str(low)])
    with pytest.raises(SystemExit):
        parse_args([opt.flag, str(low - 1)])
    assert opt.flag in capsys.readouterr().err
    field = {f.option.trainer: f for f in spec_options()}.get(opt.name)
    if field is not None:
        with_overrides(JobSpec(), {field.path: low})
        with pytest.raises(SpecError):
            with_overrides(JobSpec(), {field.path: low - 1})


def test_the_command_line_leaves_out_what_the_trainer_defaults_and_names_no_stranger() -> None:
    assert command_line({"epochs": None, "download": False, "seed": 0}) == ["--seed", "0"]
    assert command_line({"download": True, "data_dir": "/d"}) == ["--data-dir", "/d", "--download"]
    with pytest.raises(KeyError):
        command_line({"learning_rate": 0.1})
