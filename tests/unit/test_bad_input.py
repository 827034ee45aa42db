"""Issue 16, deliverable 2: bad input, systematically. Hypothesis feeds generated
specs, ``--set`` values, names and file contents to the loaders and to the CLI
in this process; each one either loads or ends in one line naming the problem
and a non-zero exit: never a traceback, never a hang (each example is one call
that returns), never a file written outside the folder the test gives torchdeck.

The runs are derandomized (the same examples each run, so CI is repeatable);
``EXAMPLES`` sums what is tried, and docs/RELIABILITY.md's table reports it."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchdeck.backends.eks.plan import load_plan
from torchdeck.backends.errors import BackendError, SpecError
from torchdeck.backends.kubernetes.importing import import_manifest
from torchdeck.backends.names import check_cluster_name, check_namespace, check_run_id, check_service_account
from torchdeck.backends.spec import load_spec
from torchdeck.cli.main import main
from torchdeck.settings import Settings, SettingsError

pytestmark = pytest.mark.slow  # the fast lane (./scripts/test --fast) leaves these out

EXAMPLES = {"spec files": 300, "--set values": 300, "names": 400, "file contents": 300, "imports": 200}
"""Examples per property (docs/RELIABILITY.md)."""

PROFILE: dict[str, Any] = dict(derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))

SPEC_KEYS = [
    "name", "nodes", "nproc_per_node", "epochs", "max_steps", "batch_size", "recipe", "model", "device",
    "image", "namespace", "data", "trainer", "cluster", "resources", "entrypoint", "metrics", "env",
    "kind", "pvc", "script", "args", "pattern", "min_nodes", "max_nodes", "seed", "lr", "gpus", "cpu",
]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["../../etc/passwd", "${HOME}", "$(rm -rf /)", "*", "a\nb", "\x00", "x" * 2000, "é", "🙂"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(SPEC_KEYS), st.text(max_size=12)), inner, max_size=5),
    ),
    max_leaves=20,
)
DOCUMENTS = st.dictionaries(st.sampled_from(SPEC_KEYS), VALUES, max_size=8)


def run_cli(folder: Path, *argv: str) -> tuple[int, str]:
    """torchdeck in this process, in ``folder`` with its state there; (exit code, stderr)."""
    err = io.StringIO()
    old = os.getcwd()
    os.environ["TORCHDECK_STATE_DIR"] = str(folder / "state")
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse's own usage errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(old)
        os.environ.pop("TORCHDECK_STATE_DIR")
    return code, err.getvalue()


def one_line_or_ok(code: int, err: str) -> None:
    """Exit 0, or non-zero with one error line (argparse's usage lines may come before its own)."""
    assert "Traceback" not in err, err
    if code != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines, f"exit {code} and nothing said"
        assert lines[-1].startswith("torchdeck") and ": error: " in lines[-1], err
        assert len(lines) == 1 or lines[0].startswith("usage:"), err
        assert len(lines[-1]) < 1200, err[:300]


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


def dump(document: object) -> str:
    try:
        return yaml.safe_dump(document, allow_unicode=True)
    except yaml.YAMLError:
        return repr(document)


@settings(max_examples=EXAMPLES["spec files"], **PROFILE)
@given(document=DOCUMENTS)
def test_generated_specs_load_or_say_why_in_one_line(tmp_path_factory, document) -> None:
    folder = tmp_path_factory.mktemp("spec")
    path = folder / "torchdeck.yaml"
    path.write_text(dump(document))
    try:
        load_spec(path)
    except SpecError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 1200
    before = files_under(folder)
    code, err = run_cli(folder, "render", str(path))
    one_line_or_ok(code, err)
    assert files_under(folder) - before <= {folder / "state"} | {p for p in files_under(folder) if "state" in p.parts}


@settings(max_examples=EXAMPLES["--set values"], **PROFILE)
@given(
    field=st.one_of(st.sampled_from(SPEC_KEYS), st.sampled_from(["trainer.seed", "cluster.kind", "resources.gpus",
                    "cluster.min_nodes", "metrics.pattern", "entrypoint.args", "env.A"]), st.text(max_size=20)),
    value=st.one_of(st.text(max_size=60), st.sampled_from(["[1", "{a: *x}", "!!python/object:os.system", "1e999",
                    "-1", "(a+)+b", "(?P<loss>(a+)+)b", "../../x", "&a [*a, *a]"])),
)  # fmt: skip
def test_set_values_apply_or_say_why_in_one_line(tmp_path_factory, field, value) -> None:
    folder = tmp_path_factory.mktemp("set")
    code, err = run_cli(folder, "render", "--set", f"{field}={value}")
    one_line_or_ok(code, err)
    assert not (folder / "torchdeck.yaml").exists()  # render writes nothing


@settings(max_examples=EXAMPLES["names"], **PROFILE)
@given(name=st.one_of(st.text(max_size=70), st.from_regex(r"[a-z0-9./*$ -]{1,60}", fullmatch=True)))
def test_names_pass_every_check_or_none_reach_a_path(tmp_path_factory, name) -> None:
    for check in (check_cluster_name, check_namespace, check_service_account, check_run_id):
        try:
            assert check(name) == name
            assert "/" not in name and ".." not in name and "\n" not in name and name.isascii()
        except SpecError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 400
    folder = tmp_path_factory.mktemp("names")
    code, err = run_cli(folder, "render", "--run-id", name)
    one_line_or_ok(code, err)
    code, err = run_cli(folder, "cluster", "init", "--name", name, "--region", "us-west-2", "--file", "c.yaml")
    one_line_or_ok(code, err)
    made = files_under(folder)
    assert made <= {folder / "c.yaml"} | {p for p in made if "state" in p.relative_to(folder).parts}, made


@settings(max_examples=EXAMPLES["file contents"], **PROFILE)
@given(
    content=st.one_of(
        st.binary(max_size=300), st.text(max_size=300).map(str.encode), DOCUMENTS.map(lambda d: dump(d).encode())
    )
)
def test_any_file_content_is_a_config_plan_or_spec_or_one_line(tmp_path_factory, content) -> None:
    folder = tmp_path_factory.mktemp("files")
    path = folder / "file.yaml"
    path.write_bytes(content)
    config = folder / "xdg" / "torchdeck" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_bytes(content)
    try:
        Settings.load(env={"XDG_CONFIG_HOME": str(folder / "xdg")})
    except SettingsError as exc:
        assert "\n" not in str(exc)
    for load in (load_spec, load_plan):
        try:
            load(path)
        except (SpecError, BackendError, OSError) as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 1200
    for argv in (["render", str(path)], ["cluster", "plan", "--file", str(path)]):
        code, err = run_cli(folder, *argv)
        one_line_or_ok(code, err)


MANIFEST_KINDS = st.sampled_from(["PyTorchJob", "ElasticJob", "MPIJob", "Job", "TrainJob", "Pod", 3, None])


@settings(max_examples=EXAMPLES["imports"], **PROFILE)
@given(
    kind=MANIFEST_KINDS,
    spec=st.dictionaries(st.sampled_from(["pytorchReplicaSpecs", "replicaSpecs", "mpiReplicaSpecs", "template",
                          "parallelism", "completions", "Master", "Worker", "containers", "command", "args"]),
                         VALUES, max_size=4),
)  # fmt: skip
def test_imported_manifests_become_specs_or_one_line(tmp_path_factory, kind, spec) -> None:
    text = dump({"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": "x"}, "spec": spec})
    try:
        import_manifest(text, "job.yaml")
    except (SpecError, BackendError) as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 1200
    folder = tmp_path_factory.mktemp("import")
    (folder / "job.yaml").write_text(text)
    code, err = run_cli(folder, "import", "job.yaml", "-o", "out.yaml")
    one_line_or_ok(code, err)
