"""Running the real trainer in subprocesses: one rank, or several under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def trainer_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHDECK_JOB_STARTED_AT"):
        env.pop(name, None)
    return env


def torchrun_cmd(nproc: int, *trainer_args: str, max_restarts: int = 0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        str(max_restarts),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "127.0.0.1:0",
        "-m",
        "torchdeck.trainer",
        *trainer_args,
    ]


def run_module(
    module: str, *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` in a subprocess, as one rank."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or trainer_env(),
        cwd=REPO,
    )


def run_trainer(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """``python -m torchdeck.trainer ARGS``, one rank."""
    return run_module("torchdeck.trainer", *args, **kwargs)


def run_evaluate(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """``python -m torchdeck.trainer.evaluate ARGS``."""
    return run_module("torchdeck.trainer.evaluate", *args, **kwargs)


def records(text: str) -> list[dict]:
    """Every JSON metric line in ``text``; fails the test on a line that
    looks like JSON and does not parse."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out
