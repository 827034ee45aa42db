"""Snapshots of a training job: written atomically, pruned, resumed from.

A snapshot is ``ckpt-<step>.pt`` in the checkpoint folder, written to a
temporary file in the same folder, fsynced, then renamed, so that a reader
sees a whole file or none. Loading uses ``torch.load(weights_only=True)``:
a snapshot holds tensors, numbers, strings and containers only.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import torch

from .errors import TrainerError

PATTERN = re.compile(r"^ckpt-(\d{8,})\.pt\Z")
JOB_FILE = "job.json"
ATTEMPTS_FILE = "attempts.json"
KEPT_RUNS = 16
"""The runs whose attempts the file counts at most (a folder resumed by run after run), newest kept."""


@dataclass
class Loaded:
    """The newest snapshot that loaded, and the newer ones that did not."""

    path: Path | None
    state: dict[str, Any] | None
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def prepare_dir(path: str | os.PathLike) -> Path:
    """Create the folder and prove it is writable, or raise TrainerError."""
    folder = Path(path).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as exc:
        raise TrainerError(
            f"checkpoint dir {folder} is not writable: {exc.strerror or exc}",
            hint="choose another --checkpoint-dir, or fix its permissions",
        ) from exc
    return folder


def snapshots(folder: str | os.PathLike) -> list[Path]:
    """Snapshot files in the folder, newest (highest step) first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := PATTERN.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def atomic_write_bytes(path: Path, writer: Callable[[BinaryIO], object]) -> int:
    """Call ``writer(fileobj)`` on a temporary file beside ``path``, then
    fsync and rename it into place. Returns the size written."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        size = os.path.getsize(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass  # some file systems cannot fsync a folder; the rename is still atomic
    return size


def save(folder: Path, step: int, state: Mapping[str, object], keep: int) -> tuple[Path, int]:
    """Write snapshot ``step`` atomically and delete all but the newest ``keep``."""
    path = folder / f"ckpt-{step:08d}.pt"
    try:
        size = atomic_write_bytes(path, lambda f: torch.save(state, f))
    except (OSError, RuntimeError) as exc:  # torch.save reports a failed write as RuntimeError
        newest = snapshots(folder)
        kept = f"{newest[0].name} stays, and a restart resumes from it" if newest else "no earlier snapshot exists"
        why = getattr(exc, "strerror", None) or str(exc).splitlines()[0][:200]
        raise TrainerError(
            f"cannot write snapshot {path.name} in {folder}: {why}; {kept}",
            "free space on that volume, or make the folder writable (--checkpoint-dir elsewhere)",
        ) from None
    if keep > 0:
        for old in snapshots(folder)[keep:]:
            try:
                old.unlink()
            except FileNotFoundError:
                pass
    return path, size


REQUIRED_KEYS = ("model", "model_name", "optimizer", "epoch", "step")


def load_newest(folder: str | os.PathLike) -> Loaded:
    """The newest snapshot that loads and has every required key; newer ones
    that are truncated or corrupt are listed in ``skipped``."""
    result = Loaded(None, None)
    for path in snapshots(folder):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many kinds for a damaged zip or pickle
            result.skipped.append(
                (path, f"{exc.__class__.__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")
            )
            continue
        missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
        if missing:
            result.skipped.append((path, f"missing {', '.join(missing)}"))
            continue
        result.path, result.state = path, state
        return result
    return result


def job_start_time(folder: Path | None) -> float:
    """When the job first started: read from ``job.json`` in the checkpoint
    folder, which the first start writes, so that restarts keep counting."""
    now = time.time()
    if folder is None:
        return now
    path = folder / JOB_FILE
    try:
        return float(json.loads(path.read_text())["started_at"])
    except (OSError, ValueError, KeyError, TypeError):
        atomic_write_bytes(path, lambda f: f.write(json.dumps({"started_at": now}).encode()))
        return now


def next_attempt(folder: Path | None, run_id: str) -> int | None:
    """This attempt of run ``run_id``, counted from 1 in ``attempts.json`` in the checkpoint folder
    (rank 0 alone calls it, once an attempt). torchrun's restart count cannot say it: a pod made
    again starts it over, and a node that joins an elastic run is no restart to it; the count of the
    job's store cannot either where the store is made again each round. None without a folder."""
    if folder is None:
        return None
    path = folder / ATTEMPTS_FILE
    try:
        counts = json.loads(path.read_text())
    except (OSError, ValueError):
        counts = {}
    if not isinstance(counts, dict):
        counts = {}
    kept = {k: v for k, v in counts.items() if isinstance(k, str) and isinstance(v, int) and k != run_id}
    number = counts.get(run_id, 0) + 1 if isinstance(counts.get(run_id), int) else 1
    kept = dict(list(kept.items())[-(KEPT_RUNS - 1) :])
    kept[run_id] = number
    atomic_write_bytes(path, lambda f: f.write(json.dumps(kept).encode()))
    return number
