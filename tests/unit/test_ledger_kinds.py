"""Issue 30: the ledger's resource kinds are one Literal type (a misspelt kind fails mypy), the
teardown's kind table covers exactly them, and a kind read back that this torchdeck does not know
is one line."""

from __future__ import annotations

import sqlite3

import pytest

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
