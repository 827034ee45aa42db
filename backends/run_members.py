"""The processes of one local run, found by the ``TORCHDECK_RUN_ID`` each carries (torchrun
starts each rank in a session of its own, so no process group holds them all): listing them and
ending what torchrun left. The launcher, ``stop`` and the status read share this."""

from __future__ import annotations

import contextlib
import os


def run_members(run_id: str) -> list:
    """Every live process of the run but this one. torchrun starts each rank in a session of its
    own, so the run's process group does not hold them; they all carry TORCHDECK_RUN_ID."""
    import psutil

    me, found = os.getpid(), []
    for proc in psutil.process_iter(["status"]):
        try:
            if (
                proc.pid != me
                and proc.info["status"] != psutil.STATUS_ZOMBIE
                and proc.environ().get("TORCHDECK_RUN_ID") == run_id
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def reap_run(run_id: str, grace_s: float = 5.0) -> int:
    """End what torchrun left running: a SIGKILLed torchrun cannot stop its ranks, which would
    train on, unwatched, holding the GPU and the rendezvous port. TERM, then KILL after
    ``grace_s``; returns how many were left."""
    import psutil

    left = run_members(run_id) if run_id else []
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(left, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return len(left)
