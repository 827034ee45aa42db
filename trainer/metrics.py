"""The trainer's metric stream: one JSON object per line.

Schema version 1. Every line carries:

=============  ==============================================================
``schema``     1
``event``      start, step, epoch, eval, checkpoint, resume, done, stopped, restarting or error
``rank``       global rank; ``local_rank`` and ``world_size`` likewise
``host``       the host name
``time``       unix seconds
``elapsed_s``  seconds since the job first started, across restarts
=============  ==============================================================

and, on every line of an attempt after the first, ``restart_count``.

and by event:

- ``start``: model, recipe, dataset, device, backend, precision, world_size,
  global_batch, epochs, steps_per_epoch, total_steps, train_size, test_size,
  params, restart_count.
- ``step``: epoch (1-based), step (optimiser steps done, job-wide), loss, lr,
  samples_per_s (this rank), step_s, data_s, compute_s (the model's own forward pass: no
  collective in it, so a rank on a slow node shows by it); with CUDA gpu_util (percent,
  null where NVML is unavailable) and gpu_mem_mb.
- ``epoch``: epoch, step, loss (mean over the epoch), samples_per_s, epoch_s.
- ``eval``: epoch, step, accuracy (0..1), loss, per_class (accuracy per class).
- ``checkpoint``: epoch, step, path, bytes, save_s.
- ``resume``: epoch, step, path, restart_count, skipped (unreadable newer checkpoints).
- ``done``: epoch, step, accuracy, best_accuracy, model_file, train_s.
- ``stopped``: epoch, step, signal, train_s: asked to stop (SIGTERM), after a snapshot.
- ``restarting``: epoch, step, ranks_stopped: some ranks, not all, were asked to stop (a pod
  deleted or evicted); every rank leaves after a snapshot for the next attempt (exit status 75).
- ``error``: message, hint.

The trainer's tools (``torchdeck.trainer.data``, ``.evaluate``, ``.model_file``) end their
standard output with one line of their own: ``result`` (``tool``, and ``result``: what the
tool made, as a mapping) or ``error`` (``tool``, ``message``, ``hint``); see ``tool_line``.

Lines go to stdout, and to ``--metrics-file`` if given; a ``{rank}`` in that
path gives each rank its own file, otherwise ranks append to one file with a
single write per line.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from .kubeflow_status import TrainerStatus

SCHEMA_VERSION = 1
EVENTS = ("start", "step", "epoch", "eval", "checkpoint", "resume", "done", "stopped", "restarting", "error")


def finite(value: object) -> object:
    """``value`` with every float that is not finite (NaN, infinity), at any depth, as None: JSON has
    no such numbers, and a diverged loss is written as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def strict_json(value: object, *, indent: int | None = None, separators: tuple[str, str] | None = None) -> str:
    """``json.dumps`` whose text every JSON parser takes (jq, a browser's): non-finite numbers are
    null. Every JSON torchdeck prints or writes for another program goes through it."""
    return json.dumps(finite(value), allow_nan=False, indent=indent, separators=separators)


class MetricsWriter:
    """Writes schema-1 metric lines for one rank."""

    def __init__(
        self,
        rank: int = 0,
        local_rank: int = 0,
        world_size: int = 1,
        job_started_at: float | None = None,
        metrics_file: str | None = None,
        stream: IO[str] | None = None,
        restart_count: int = 0,
    ):
        self.rank, self.local_rank, self.world_size = rank, local_rank, world_size
        self.restart_count = restart_count
        """The attempt's restarts, on every line of an attempt after the first (a status that reads a
        log's tail alone still counts them)."""
        self.host = socket.gethostname()
        self.job_started_at = job_started_at if job_started_at is not None else time.time()
        self.stream = stream if stream is not None else sys.stdout
        self.status = TrainerStatus(rank=rank)  # Kubeflow Trainer's own progress, where it asks for it
        self._fd: int | None = None
        if metrics_file:
            path = metrics_file.replace("{rank}", str(rank))
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(self, event: str, **fields: object) -> dict[str, Any]:
        """Write one line and return the record."""
        if event not in EVENTS:
            raise ValueError(f"unknown metrics event {event!r}")
        now = time.time()
        record = {
            "schema": SCHEMA_VERSION,
            "event": event,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "host": self.host,
            "time": round(now, 3),
            "elapsed_s": round(now - self.job_started_at, 3),
        }
        if self.restart_count:
            record["restart_count"] = self.restart_count
        record.update(fields)
        line = strict_json(record, separators=(",", ":")) + "\n"
        self.stream.write(line)
        self.stream.flush()
        if self._fd is not None:
            os.write(self._fd, line.encode())
        self.status.feed(record)
        return record

    def close(self) -> None:
        self.status.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def parse_line(line: str | bytes, loads: Callable[[str | bytes], Any] = json.loads) -> dict[str, Any] | None:
    """The record on a line of trainer output, or None for human text.
    ``loads`` may be a faster JSON decoder (the console passes orjson's)
    whose errors are ValueErrors, as orjson's are."""
    line = line.strip()
    if line[:1] not in ("{", b"{"):
        return None
    try:
        record = loads(line)
    except ValueError:
        return None
    if type(record) is not dict or record.get("schema") != SCHEMA_VERSION or "event" not in record:
        return None
    return record


def tool_line(tool: str, result: Mapping[str, object] | None = None, error: object = None) -> str:
    """The last line a trainer tool prints on stdout: its ``result`` or its ``error`` (a
    TrainerError: message and hint), as schema 1, so a backend reads a typed answer rather than
    the tool's words (``backends.events.tool_result`` is the reader)."""
    if error is not None:
        record = {"schema": SCHEMA_VERSION, "event": "error", "tool": tool,
                  "message": getattr(error, "message", str(error)), "hint": getattr(error, "hint", None) or ""}  # fmt: skip
    else:
        record = {"schema": SCHEMA_VERSION, "event": "result", "tool": tool, "result": result or {}}
    return strict_json(record, separators=(",", ":"))
