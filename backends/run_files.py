"""A local run's files read back, cheaply, never whole and only where they are regular files (a
FIFO or a link to ``/dev/zero`` in a run's folder is passed over): the kept status of an ended
run, the last lines (or the first) of a log or metric file, and a tail that follows a file as it
grows."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import BinaryIO

from torchdeck.trainer.regular_files import open_regular

from .base import JobState, JobStatus, RankProgress
from .cost import RunCost
from .run_records import STATUS_BYTES, RunRecordError, read_record
from .schema import conforms, typed

STATUS_FILE = "status.json"
"""An ended run's status, kept so that listing runs reads one file each."""


def kept_status(run_dir: str) -> JobStatus | None:
    """An ended run's status.json, if it is there and is one (else None: work it out again)."""
    return read_kept_status(Path(run_dir) / STATUS_FILE, os.path.basename(run_dir), "local", run_dir)


def read_kept_status(path: Path, run_id: str, backend: str, location: str) -> JobStatus | None:
    """The status of ``run_id`` kept at ``path`` (a local run's folder's, or a cluster run's kept when
    its job was deleted), if it is there and is one. Its fields are typed as ``run_records`` types
    every record: a field of the wrong type is unknown."""
    try:
        kept = read_record(path, STATUS_BYTES)
    except RunRecordError:
        return None  # worked out again, and kept anew over what was there
    if kept is None or kept.get("run_id") != run_id:
        return None
    try:
        state = JobState(kept.get("state"))
    except ValueError:
        return None
    rows = kept["ranks"] if isinstance(kept.get("ranks"), list) else []
    ranks = [typed(RankProgress, r) for r in rows if isinstance(r, dict) and conforms(r.get("rank"), int)]
    try:
        cost = RunCost.from_dict(kept["cost"]) if isinstance(kept.get("cost"), dict) else None
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        cost = None
    defaults = typed(_Required, kept)
    return typed(
        JobStatus,
        kept,
        state=state,
        location=location,
        ranks=ranks,
        cost=cost,
        backend=backend,
        name=defaults.name or run_id,
        world_size=defaults.world_size,
        submitted_at=defaults.submitted_at,
    )


@dataclasses.dataclass
class _Required:
    """The fields a kept status must have, with what they are where they are not."""

    name: str = ""
    world_size: int = 0
    submitted_at: float = 0.0


def tail_lines(path: Path, max_bytes: int = 32768) -> list[bytes]:
    """The last whole lines of a file (at most ``max_bytes`` of them)."""
    try:
        with open_regular(path) as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    lines = data.split(b"\n")
    if size > max_bytes:
        lines = lines[1:]
    return [line for line in lines if line.strip()]


def first_line(path: Path) -> bytes:
    """A file's first line (a metric file's start record), or b"" where it cannot be read."""
    try:
        with open_regular(path) as f:
            return f.readline(1 << 16)
    except OSError:
        return b""


class FileTail:
    """Reads what was appended to one file since the last call, whole lines
    only, at most ``max_bytes`` a call so that a reader far behind catches
    up in bounded steps instead of one huge batch."""

    __slots__ = ("path", "file", "partial")

    def __init__(self, path: Path):
        self.path, self.partial = path, b""
        self.file: BinaryIO | None = None

    def read_lines(self, max_bytes: int = 1 << 20) -> list[bytes]:
        if self.file is None:
            try:
                self.file = open_regular(self.path)
            except OSError:
                return []
        data = self.file.read(max_bytes)
        if not data:
            return []
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > max_bytes:  # no line of a metric file is this long: not one to hold
            self.partial = b""
        return lines

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
