"""A local run's records, read back as input: ``launch.json``, ``pid.json``, ``exit.json``,
``cancel`` and the kept ``status.json``.

A run's folder is written by torchdeck, but also by the user's script, its ranks and, under
``train --in-image``, whatever code the image runs; so each record is read as a manifest would be:
through the one file gate (a regular file, its size capped before a byte is read, one line naming
the file: ``files.read_bytes``), then parsed into a typed record with a schema. A field of the wrong
type (``"submitted_at": "x"``, ``"pid": [1]``), a number past a float or not finite, is that field
unknown, never a traceback. A record that is not there is None; one that is there and is no record
(a FIFO, ``[1]``, not JSON) is a ``RunRecordError``, which the backend shows as one row saying so,
the other runs listed beside it."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, TypeVar

from ..trainer.metrics import strict_json
from .errors import SpecError
from .files import MAX_DIGITS, read_bytes, write_atomically
from .schema import typed

RECORD_BYTES = 1 << 20
"""A launch, pid, exit or cancel record: a command line and an environment at most."""
STATUS_BYTES = 16 << 20
"""A kept status: a line per rank, for thousands of ranks."""

R = TypeVar("R")


class RunRecordError(SpecError):
    """A run record that is there but is not one: one line naming the file."""


def _finite(text: str) -> float | None:
    number = float(text)
    return number if math.isfinite(number) else None


def _bounded_int(text: str) -> int | None:
    return int(text) if len(text) <= MAX_DIGITS + 1 else None


def parse_record(data: bytes | str, source: str) -> dict[str, Any]:
    """A record's JSON object. Non-finite numbers (``NaN``, ``1e999``) and integers past
    ``MAX_DIGITS`` digits read as null: the field is unknown, the rest of the record stands."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    try:  # nesting past the parser's depth is its RecursionError (a character-by-character depth
        # count cost a listing of 2,000 runs 0.7 s)
        value = json.loads(text, parse_float=_finite, parse_int=_bounded_int, parse_constant=lambda name: None)
    except RecursionError:
        raise RunRecordError("", "not a run record: nested too deep to read", "", source) from None
    except ValueError as exc:
        raise RunRecordError("", f"not a run record: {str(exc).splitlines()[0][:120]}", "", source) from None
    if not isinstance(value, dict):
        raise RunRecordError("", f"not a run record: JSON {type(value).__name__} where an object belongs", "", source)
    return value


def read_record(path: Path, max_bytes: int = RECORD_BYTES) -> dict[str, Any] | None:
    """The record at ``path`` as a JSON object; None where there is no file; RunRecordError (one line
    naming the file) where something is there that is not a record."""
    try:
        data = read_bytes(path, max_bytes, hint=f"the run's folder {path.parent} holds what torchdeck did not write")
    except FileNotFoundError:
        return None
    except SpecError as exc:
        raise RunRecordError("", exc.reason, exc.hint, str(path)) from None
    return parse_record(data, str(path))


# -- the records ---------------------------------------------------------------------------------


@dataclasses.dataclass
class LaunchRecord:
    """``launch.json``: what the launcher starts, written at submit (0600: it holds the spec's env)."""

    run_id: str = ""
    name: str = ""
    cmd: list[str] = dataclasses.field(default_factory=list)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    cwd: str = ""
    port: int = 0
    submitted_at: float = 0.0
    world_size: int = 0
    host: str = ""
    in_image: str | None = None
    node_price_per_hour: float | None = None
    budget: float | None = None
    price_per_hour: float | None = None
    token: str = ""
    """The run's launcher carries it in its environment (``TORCHDECK_RUN_TOKEN``): ``stop`` signals
    a process only where /proc shows it there (``LocalBackend._launcher``)."""


@dataclasses.dataclass
class PidRecord:
    """``pid.json``: which process leads the run (a claim: ``stop`` checks it against /proc)."""

    pid: int | None = None
    create_time: float | None = None


@dataclasses.dataclass
class ExitRecord:
    """``exit.json``: how torchrun ended, written by the launcher (or by ``stop``)."""

    exit_code: int | None = None
    finished_at: float | None = None
    signals: list[int] = dataclasses.field(default_factory=list)
    reaped: int = 0


@dataclasses.dataclass
class CancelRecord:
    """``cancel``: a stop was asked for, by a person or by the run's budget."""

    requested_at: float | None = None
    budget: float | None = None
    spent: float | None = None


@dataclasses.dataclass
class BudgetRecord:
    """``budget.json``: the budget set while the run goes on (``torchdeck budget RUN AMOUNT``), in
    place of the one it was submitted with."""

    budget: float | None = None
    set_at: float | None = None


def read_typed(cls: type[R], path: Path) -> R | None:
    """The record at ``path`` as ``cls`` (None where there is none); RunRecordError where unreadable."""
    data = read_record(path)
    return None if data is None else typed(cls, data)


def budget_now(run_dir: Path, launch: LaunchRecord) -> float | None:
    """The run's budget as it stands: the one set while it runs (``budget.json``), else the one it
    was submitted with; an unreadable ``budget.json`` leaves the submitted one."""
    try:
        changed = read_typed(BudgetRecord, run_dir / "budget.json")
    except RunRecordError:
        changed = None
    return changed.budget if changed is not None and changed.budget is not None else launch.budget


def write_json(path: Path, data: dict, mode: int | None = None) -> None:
    """Write a run record atomically (a reader never sees half a file), as strict JSON."""
    write_atomically(path, strict_json(data, indent=1), mode)
