"""Issue 30: kinds and states are Literal types, so a misspelt one fails the type check (mypy is run
here on a snippet against the package, as ./scripts/check runs it); the teardown's kind table covers
exactly the ledger's kinds; and a kind or state read back that this torchdeck does not know is one
line."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from torchdeck.backends.eks.access import ClusterRecord
from torchdeck.backends.eks.teardown import RESOURCE_KINDS
from torchdeck.backends.errors import BackendError
from torchdeck.backends.ledger import RESOURCE_KIND_NAMES, Ledger


def test_the_kind_table_and_the_kind_type_name_the_same_kinds() -> None:
    assert [k.name for k in RESOURCE_KINDS] == list(RESOURCE_KIND_NAMES)  # the same kinds, in teardown order


def test_a_kind_the_ledger_does_not_know_is_one_line(tmp_path) -> None:
    ledger = Ledger(tmp_path)
    ledger.add("s3-bucket", "models-1", region="us-west-2")
    assert [r.kind for r in ledger.resources()] == ["s3-bucket"]
    with sqlite3.connect(tmp_path / "ledger.sqlite") as conn:
        conn.execute("UPDATE resources SET kind='quantum-bucket'")
    with pytest.raises(BackendError, match="a kind this torchdeck does not know: 'quantum-bucket'"):
        ledger.resources()


SNIPPET = """\
from torchdeck.backends.eks.access import ClusterRecord
from torchdeck.backends.eks.progress import Progress
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.spec import ClusterOptions, JobSpec

record = ClusterRecord("demo", "us-west-2")
Progress("build", "built", 0.0, "done")  # spelt right: no error
Progress("build", "built", 0.0, "dnoe")  # line 8
ClusterOptions(kind="pytorchjobs")  # line 9
record.state = "delted"  # line 10
record.note("s3-buckt", "models", True)  # line 11
KubernetesBackend().tasks.run(JobSpec(), "data-prepare", None, print)  # line 12
ClusterOptions(kind="elasticjob")  # spelt right: no error
if record.state == "Deleted":  # line 14: never true, so strict_equality refuses it
    pass
"""


def test_a_misspelt_kind_or_state_fails_the_type_check(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "snippet.py").write_text(SNIPPET)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "torchdeck").symlink_to(root)
    found = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(root / "pyproject.toml"), "--cache-dir",
         str(root / ".mypy_cache"), "snippet.py"],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(tmp_path / "src")}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    lines = sorted({int(line.split(":")[1]) for line in found.stdout.splitlines() if line.startswith("snippet.py:")})
    assert lines == [8, 9, 10, 11, 12, 14], found.stdout


def test_a_record_whose_state_this_torchdeck_does_not_know_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "clusters").mkdir()
    path = tmp_path / "clusters" / "demo.json"
    path.write_text(json.dumps({"name": "demo", "region": "us-west-2", "state": "created"}))
    loaded = ClusterRecord.load(tmp_path, "demo")
    assert loaded is not None and loaded.state == "created"
    path.write_text(json.dumps({"name": "demo", "region": "us-west-2", "state": "half-made"}))
    with pytest.raises(BackendError, match="state must be one of planned, creating, created") as caught:
        ClusterRecord.load(tmp_path, "demo")
    assert "\n" not in str(caught.value)
