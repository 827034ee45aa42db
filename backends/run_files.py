"""A local run's files read back, cheaply and never whole: a JSON file that may be torn or
missing, the kept status of an ended run, the last lines (or the first) of a log or metric file,
and a tail that follows a file as it grows."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import BinaryIO

from .base import JobState, JobStatus, RankProgress
from .cost import RunCost

STATUS_FILE = "status.json"
"""An ended run's status, kept so that listing runs reads one file each."""


def read_json(path: Path) -> dict | None:
    """A JSON file torchdeck wrote into the run's folder, or None where it is missing or torn."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def kept_status(run_dir: str) -> JobStatus | None:
    """An ended run's status.json, if it is there and whole (else None: work it out again)."""
    try:
        with open(os.path.join(run_dir, STATUS_FILE), "rb") as f:
            kept = json.loads(f.read())
        if kept["run_id"] != os.path.basename(run_dir):
            return None
        ranks = [RankProgress(**r) for r in kept.get("ranks") or []]
        cost = RunCost.from_dict(kept["cost"]) if kept.get("cost") else None
        return JobStatus(
            **{**kept, "state": JobState(kept["state"]), "location": run_dir, "ranks": ranks, "cost": cost}
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None


def tail_lines(path: Path, max_bytes: int = 32768) -> list[bytes]:
    """The last whole lines of a file (at most ``max_bytes`` of them)."""
    try:
        with open(path, "rb") as f:
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
        with open(path, "rb") as f:
            return f.readline()
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
                self.file = open(self.path, "rb")
            except OSError:
                return []
        data = self.file.read(max_bytes)
        if not data:
            return []
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        return lines

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
