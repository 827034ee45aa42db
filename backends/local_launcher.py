"""``python -m torchdeck.backends.local_launcher RUN_DIR``: the process that
owns one local run. It leads its own session, so closing the console or
losing the SSH connection leaves the job running; it starts torchrun, waits
for it, and records the exit status in the run folder for whoever reattaches.

It outlives a SIGTERM sent to its process group (``torchdeck stop``) just
long enough to record that the run ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .run_members import reap_run
from .run_records import LaunchRecord, RunRecordError, budget_now, read_typed, write_json


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0])
    record_pid(run_dir)
    try:
        launch = read_typed(LaunchRecord, run_dir / "launch.json")
    except RunRecordError as exc:
        launch, why = None, str(exc)
    else:
        why = (
            "it has no launch.json" if launch is None else "its launch.json names no command" if not launch.cmd else ""
        )
    if launch is None or why:
        with open(run_dir / "launcher.log", "ab") as log:
            log.write(f"torchdeck: cannot start the run: {why}\n".encode())
        write_json(run_dir / "exit.json", {"exit_code": 127, "finished_at": time.time(), "signals": []})
        return 127
    received: list[int] = []
    # A handler, not SIG_IGN: an ignored signal would stay ignored in torchrun
    # across exec, and torchrun must see the stop request too.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: received.append(signum))
    # the token proves this process the run's launcher (``stop``); torchrun and the ranks need none
    env = {k: v for k, v in os.environ.items() if k != "TORCHDECK_RUN_TOKEN"} | launch.env
    with open(run_dir / "launcher.log", "ab", buffering=0) as log:
        try:
            child = subprocess.Popen(
                launch.cmd,
                cwd=launch.cwd or None,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            log.write(f"torchdeck: cannot start torchrun: {exc}\n".encode())
            write_json(run_dir / "exit.json", {"exit_code": 127, "finished_at": time.time(), "signals": received})
            return 127
        code = wait_within_budget(run_dir, launch, child)
    left = reap_run(os.environ.get("TORCHDECK_RUN_ID", ""))
    write_json(
        run_dir / "exit.json", {"exit_code": code, "finished_at": time.time(), "signals": received, "reaped": left}
    )
    from .errors import BackendError
    from .local import LocalBackend

    backend = LocalBackend(run_dir.parent.parent, local_price_per_hour=launch.price_per_hour)
    try:  # the status as it stays, so that listing runs reads one file each
        status = backend.record_final_status(run_dir.name)
    except (BackendError, OSError) as exc:  # the run's files say how it ended; status works it out again
        with open(run_dir / "launcher.log", "ab") as log:
            log.write(f"torchdeck: could not record the run's final status: {exc}\n".encode())
        return 0
    from .run_digest import DigestStore, digest_of

    try:
        digest_of(backend, DigestStore(run_dir.parent.parent), status)  # what comparisons read, made once
    except (BackendError, OSError) as exc:  # a comparison makes it instead
        with open(run_dir / "launcher.log", "ab") as log:
            log.write(f"torchdeck: could not digest the run's metrics: {exc}\n".encode())
    return 0


BUDGET_STOP_GRACE_S = 60.0
"""How long torchrun has, once a budget stop is asked, to stop its ranks (they write a snapshot
first) before it is killed."""


BUDGET_POLL_S = 1.0
"""How often the launcher reads the run's budget again (``torchdeck budget`` may change it)."""


def budget_deadline(launch: LaunchRecord, budget: float | None) -> float | None:
    """When the run's cost reaches ``budget``: this machine's price an hour is fixed at submit."""
    if not budget or not launch.price_per_hour or not launch.submitted_at:
        return None
    return launch.submitted_at + budget / launch.price_per_hour * 3600.0


def wait_within_budget(run_dir: Path, launch: LaunchRecord, child: subprocess.Popen) -> int:
    """Wait for torchrun; past the budget (as it stands now: ``budget_now``), record why and ask it
    to stop (SIGTERM: the built-in trainer writes a snapshot, then every rank exits), and kill it if
    it has not within the grace."""
    budget = launch.budget
    while True:
        budget = budget_now(run_dir, launch)
        deadline = budget_deadline(launch, budget)
        if deadline is not None and time.time() >= deadline:
            break
        wait = BUDGET_POLL_S if deadline is None else min(BUDGET_POLL_S, max(0.0, deadline - time.time()))
        try:
            return child.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    spent = (time.time() - launch.submitted_at) / 3600.0 * (launch.price_per_hour or 0.0)
    write_json(run_dir / "cancel", {"requested_at": time.time(), "budget": budget, "spent": round(spent, 6)})
    child.send_signal(signal.SIGTERM)
    try:
        return child.wait(timeout=BUDGET_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()


def record_pid(run_dir: Path) -> None:
    """Say which process leads the run. The console that starts a launcher writes this too, but a
    console killed right after starting it would leave a run nobody could see running or stop."""
    import psutil

    write_json(run_dir / "pid.json", {"pid": os.getpid(), "create_time": psutil.Process().create_time()})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
