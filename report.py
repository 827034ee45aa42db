"""Reporting metrics from your own training script to torchdeck: one JSON line
per call on standard output (schema 1, as torchdeck's own trainer writes,
``torchdeck.trainer.metrics``), which the monitor, ``jobs``, ``status`` and
``train`` read on every backend. Standard library only: a training image needs
this file, not torchdeck's console.

    from torchdeck import report

    report.start(epochs=10, total_steps=3910)
    for step, (x, y) in enumerate(loader, 1):
        ...
        report.step(step=step, epoch=epoch, loss=loss.item(), samples_per_s=n / dt, lr=lr)
    report.eval(epoch=epoch, accuracy=0.91)
    report.done(accuracy=0.91)

Every rank reports its own curve (the rank is torchrun's RANK). Printing
``loss: 1.23`` instead works too: torchdeck reads the common text formats
(``torchdeck.trainer.textmetrics``); this helper says exactly what is meant."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import TextIO

SCHEMA = 1


def _number(value: object, depth: int = 0) -> object:
    """A value as JSON takes it, at any depth: tensors' and numpy's ``.item()`` taken, NaN and
    infinities as null (a strict reader drops a line with NaN, and the monitor is one), mappings and
    sequences cleaned inside, and anything else as its text. Never raises: reporting must not end
    the training loop that calls it."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except Exception:  # noqa: BLE001 - a tensor of many elements: its text instead
            return str(value)[:200]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth < 8 and isinstance(value, dict):
        return {str(k): _number(v, depth + 1) for k, v in value.items()}
    if depth < 8 and isinstance(value, (list, tuple)):
        return [_number(v, depth + 1) for v in value]
    return str(value)[:200]


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:  # RANK=abc: torchdeck reads the record; the user's script goes on
        return default


def emit(event: str, out: TextIO | None = None, **fields: object) -> dict[str, object]:
    """Write one record (``event`` and ``fields``) and return it."""
    record: dict[str, object] = {
        "schema": SCHEMA,
        "event": event,
        "rank": _env_int("RANK", 0),
        "world_size": _env_int("WORLD_SIZE", 1),
        "time": time.time(),
    }
    record.update({k: _number(v) for k, v in fields.items() if v is not None})
    stream = out or sys.stdout
    stream.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
    stream.flush()
    return record


def start(
    epochs: int | None = None, total_steps: int | None = None, out: TextIO | None = None, **fields: object
) -> dict[str, object]:
    """The run's shape: how many epochs and optimiser steps to expect (for the progress bar)."""
    return emit("start", epochs=epochs, total_steps=total_steps, out=out, **fields)


def step(
    loss: float, step: int, epoch: int | None = None, out: TextIO | None = None, **fields: object
) -> dict[str, object]:
    """One training step: its loss, and where it is (``samples_per_s``, ``lr`` and the like too)."""
    return emit("step", loss=loss, step=step, epoch=epoch, out=out, **fields)


def eval(accuracy: float, epoch: int | None = None, out: TextIO | None = None, **fields: object) -> dict[str, object]:  # noqa: A001
    """An evaluation: accuracy from 0 to 1 (a percentage over 1 is taken as one)."""
    shown = _number(accuracy)
    if isinstance(shown, (int, float)) and shown > 1:
        shown = shown / 100
    return emit("eval", accuracy=shown, epoch=epoch, out=out, **fields)


def done(accuracy: float | None = None, out: TextIO | None = None, **fields: object) -> dict[str, object]:
    """The end of training, with the final accuracy where there is one."""
    return emit("done", accuracy=accuracy, out=out, **fields)
