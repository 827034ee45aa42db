"""Real torchrun jobs over gloo on this machine: two ranks on the real
CIFAR-10 subset, and a worker killed (SIGKILL) or stopped alone (SIGTERM) mid-run."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from trainer_runs import REPO, records, torchrun_cmd, trainer_env

pytestmark = pytest.mark.slow


def test_two_ranks_train_on_the_real_subset(cifar_dir: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        torchrun_cmd(2, "--data-dir", str(cifar_dir), "--max-steps", "6", "--checkpoint-dir", str(tmp_path / "ck")),
        capture_output=True,
        text=True,
        timeout=240,
        env=trainer_env(),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = records(proc.stdout)
    for rank in (0, 1):
        mine = [r for r in lines if r["rank"] == rank]
        start = next(r for r in mine if r["event"] == "start")
        assert start["world_size"] == 2 and start["backend"] == "gloo" and start["train_size"] == 5085
        assert start["global_batch"] == 256 and start["total_steps"] == 6
        steps = [r for r in mine if r["event"] == "step"]
        assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
        assert all(math.isfinite(r["loss"]) and r["loss"] > 0 for r in steps)
        # the rank's own compute (its forward pass), inside the step that also holds the all-reduce
        assert all(0 < r["compute_s"] < r["step_s"] for r in steps), steps
        assert start["nodes"] == [start["host"]] * 2  # where each rank is: both on this machine
        assert mine[-1]["event"] == "done"
    # Each rank reports its own batch's loss; the evaluation is job-wide and agrees.
    loss = {r["rank"]: r["loss"] for r in lines if r["event"] == "step" and r["step"] == 1}
    assert loss[0] != loss[1]
    evals = [r for r in lines if r["event"] == "eval"]
    assert len(evals) == 2 and evals[0]["accuracy"] == evals[1]["accuracy"]
    assert evals[0]["accuracy"] > 0.15  # six steps of the default recipe beat chance (0.10) on real images
    assert [r["rank"] for r in lines if r["event"] == "checkpoint"] == [0]  # only rank 0 writes


def _worker(parent: psutil.Process, rank: str) -> psutil.Process | None:
    for child in parent.children(recursive=True):
        try:
            if child.environ().get("RANK") == rank and "torchdeck.trainer" in " ".join(child.cmdline()):
                return child
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped-alone"])
def test_killed_worker_restarts_from_the_checkpoint(cifar_dir: Path, tmp_path: Path, how: signal.Signals) -> None:
    """A rank killed, or asked to stop alone (SIGTERM to its process: its pod deleted or evicted, not
    the run stopped), is restarted by torchrun and the job continues from a snapshot to its end; the
    one stopped alone first has every rank leave at one step after a snapshot there, so no step is lost."""
    ck = tmp_path / "ck"
    out = tmp_path / "stdout.log"
    with open(out, "w") as stdout:
        job = subprocess.Popen(
            torchrun_cmd(
                2,
                "--data-dir",
                str(cifar_dir),
                "--checkpoint-dir",
                str(ck),
                "--checkpoint-every",
                "4",
                "--epochs",
                "2",
                "--max-steps",
                "30",
                "--log-every",
                "1",
                max_restarts=1,
            ),
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            env=trainer_env(),
            cwd=REPO,
            start_new_session=True,
        )
    try:
        # killed once the first checkpoint is there, with 26 steps to go (a step takes 70 ms here): a look
        # that comes late still finds rank 1 at work
        deadline = time.monotonic() + 300  # a bound on a hang, not on the host's speed
        while not (ck / "ckpt-00000004.pt").exists():
            assert job.poll() is None and time.monotonic() < deadline, "no checkpoint at step 4"
            time.sleep(0.1)
        assert job.poll() is None, "the job ended before rank 1 could be killed"
        victim = _worker(psutil.Process(job.pid), "1")
        assert victim is not None and victim.is_running(), "rank 1 ended before it could be killed"
        os.kill(victim.pid, how)
        _, stderr = job.communicate(timeout=240)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 0, stderr[-3000:]
    lines = records(out.read_text())
    resumes = [r for r in lines if r["event"] == "resume"]
    assert {r["rank"] for r in resumes} == {0, 1}
    assert all(r["restart_count"] == 1 and r["step"] >= 4 for r in resumes)
    assert not [r for r in lines if r["event"] == "stopped"]  # the run was never stopped
    if how == signal.SIGTERM:
        left = [r for r in lines if r["event"] == "restarting"]
        assert {r["rank"] for r in left} == {0, 1} and {r["ranks_stopped"] for r in left} == {1}
        assert {r["step"] for r in resumes} == {left[0]["step"]}, (left, resumes)  # nothing lost
    restarted = [r for r in lines if r["event"] == "start" and r["restart_count"] == 1]
    assert len(restarted) == 2 and restarted[0]["start_step"] == resumes[0]["step"]
    # After the restart, training continues from the checkpoint, not from step 1.
    after = [r["step"] for r in lines if r["event"] == "step" and r["time"] > resumes[0]["time"]]
    assert after and min(after) == resumes[0]["step"] + 1
    done = [r for r in lines if r["event"] == "done"]
    assert len(done) == 2 and all(r["step"] == 30 for r in done)  # the --max-steps, finished
    assert (ck / "model.pt").is_file()
