"""Driving the local backend and the ``torchdeck`` command in tests."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
from trainer_runs import REPO, trainer_env

from torchdeck.backends.base import JobStatus
from torchdeck.backends.local import LocalBackend


def cli_env(state: Path) -> dict[str, str]:
    env = trainer_env()
    env["TORCHDECK_STATE_DIR"] = str(state)
    env.pop("TORCHDECK_SPEC", None)
    return env


def torchdeck(state: Path, *args: str, timeout: float = 180, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``torchdeck ARGS`` in a subprocess, with its own state directory."""
    return run_cli(args, cli_env(state), cwd, timeout)


def run_cli(args: Sequence[str], env: dict[str, str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """``torchdeck ARGS`` in a subprocess with the environment ``env``, its output captured."""
    command = [sys.executable, "-m", "torchdeck", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def wait_status(backend: LocalBackend, run_id: str, condition, timeout: float = 120) -> JobStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = backend.status(run_id)
        if condition(status):
            return status
        if status.state.is_terminal or time.monotonic() > deadline:
            raise AssertionError(f"{run_id}: gave up waiting; now {status}")
        time.sleep(0.2)


def finished(backend: LocalBackend, run_id: str, timeout: float = 180) -> JobStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = backend.status(run_id)
        if status.state.is_terminal:
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"{run_id} did not finish: {status}")
        time.sleep(0.2)


def run_processes(run_id: str) -> list[psutil.Process]:
    """Every live process started for a run (they all carry its id)."""
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get("TORCHDECK_RUN_ID") == run_id:
                out.append(proc)
        except psutil.Error:
            continue
    return out


def left_running(run_id: str, grace_s: float = 10.0) -> list[psutil.Process]:
    """The run's processes still alive after ``grace_s``: a launcher writing the run's last files
    as it exits is not one left behind."""
    deadline = time.monotonic() + grace_s
    while (alive := run_processes(run_id)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def rank_process(run_id: str, rank: int) -> psutil.Process:
    for proc in run_processes(run_id):
        try:
            if proc.environ().get("RANK") == str(rank) and "torchdeck.trainer" in " ".join(proc.cmdline()):
                return proc
        except psutil.Error:
            continue
    raise AssertionError(f"no process for rank {rank} of {run_id}")


def quick_spec_args(data_dir: Path, *extra: str) -> list[str]:
    return ["--data-dir", str(data_dir), "--nproc-per-node", "2", *extra]


def monitor_snapshot(backend: LocalBackend, run_id: str):
    """The monitor's state of an ended run, folded from all its metric files (what the monitor shows)."""
    import asyncio

    from torchdeck.monitor.state import MonitorState

    async def fold() -> MonitorState:
        state = MonitorState()
        async for batch in backend.metrics(run_id, follow=False):
            state.ingest(batch)
        return state

    return asyncio.run(fold()).snapshot()


def live_launcher(state: Path, run_id: str, world_size: int = 1) -> subprocess.Popen:
    """A run folder whose launcher is alive: the real one, started as a submit starts it, with
    ``sleep`` for torchrun, so a stream of the run never ends by itself. torchdeck takes a process
    for a run's launcher only where /proc proves it (issue 40), never because a pid file names it;
    end it with ``end_launcher``."""
    import json
    import os

    run_dir = state / "runs" / run_id
    (run_dir / "metrics").mkdir(parents=True, exist_ok=True)
    (run_dir / "launch.json").write_text(
        json.dumps(
            {"run_id": run_id, "name": run_id.split("-")[0], "cmd": ["sleep", "86400"], "env": {}, "cwd": "/",
             "port": 0, "submitted_at": time.time(), "world_size": world_size, "token": f"{run_id}-token"}
        )
    )  # fmt: skip
    (run_dir / "spec.yaml").write_text(f"name: {run_id.split('-')[0]}\n")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "torchdeck.backends.local_launcher", str(run_dir)],
        env={**os.environ, "TORCHDECK_RUN_ID": run_id, "TORCHDECK_RUN_TOKEN": f"{run_id}-token"},
        start_new_session=True,
    )
    # until the launcher has written its pid.json, not while the status says "starting its launcher": that
    # lasts LAUNCHER_START_S from the submit, and a loaded host may take longer to start a Python
    deadline = time.monotonic() + 300
    while not (run_dir / "pid.json").exists():
        assert launcher.poll() is None, "the launcher ended before it wrote its pid.json"
        assert time.monotonic() < deadline, "the launcher wrote no pid.json in 300 s"
        time.sleep(0.05)
    assert not LocalBackend(state).status(run_id).state.is_terminal, "the launcher was not taken for the run's"
    return launcher


def end_launcher(launcher: subprocess.Popen) -> None:
    """Kill a ``live_launcher`` and what it started (its session)."""
    import contextlib
    import os
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait()
