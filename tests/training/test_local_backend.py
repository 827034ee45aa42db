"""The local backend and the headless CLI against real torchrun jobs on the
real CIFAR-10 subset: train, reattach, logs, stop, a killed rank, failures."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys

import pytest
from local_runs import cli_env, finished, quick_spec_args, rank_process, run_processes, torchdeck, wait_status
from trainer_runs import REPO

from torchdeck.backends.base import JobState
from torchdeck.backends.errors import RunIdTaken, RunNotFound, SpecError
from torchdeck.backends.local import LocalBackend
from torchdeck.backends.spec import Entrypoint, JobSpec, TrainerOptions
from torchdeck.monitor.state import MonitorState


def test_render_is_the_torchrun_command_and_starts_nothing(tmp_path):
    backend = LocalBackend(tmp_path / "state")
    text = backend.plan(JobSpec(nproc_per_node=3, max_restarts=2, trainer=TrainerOptions(epochs=5))).text()
    assert "torch.distributed.run" in text and "--nproc-per-node 3" in text and "--max-restarts 2" in text
    assert "--rdzv-backend c10d" in text and "--epochs 5" in text
    assert not (tmp_path / "state").exists()


def test_local_backend_runs_one_node(tmp_path):
    with pytest.raises(SpecError) as info:
        LocalBackend(tmp_path).submit(JobSpec(nodes=2))
    assert info.value.field == "nodes" and "--backend kubernetes" in info.value.hint


def test_unknown_run_is_one_line(tmp_path):
    with pytest.raises(RunNotFound):
        LocalBackend(tmp_path).status("nope")
    result = torchdeck(tmp_path, "logs", "nope")
    assert result.returncode == 1
    assert result.stderr.strip() == "torchdeck: error: no run 'nope' (hint: `torchdeck jobs` lists the runs)"


def test_bad_spec_file_gives_one_clear_line(tmp_path):
    spec = tmp_path / "torchdeck.yaml"
    spec.write_text("name: demo\ntrainer:\n  epochs: ten\n")
    result = torchdeck(tmp_path / "state", "train", str(spec))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"torchdeck: error: {spec}: trainer.epochs: must be an integer >= 1, got 'ten'")
    assert not (tmp_path / "state" / "runs").exists()  # nothing started


def test_init_writes_a_spec_that_train_accepts(tmp_path):
    result = torchdeck(tmp_path / "state", "init", str(tmp_path / "t.yaml"))
    assert result.returncode == 0
    again = torchdeck(tmp_path / "state", "init", str(tmp_path / "t.yaml"))
    assert again.returncode == 1 and "--force" in again.stderr
    dry = torchdeck(tmp_path / "state", "train", str(tmp_path / "t.yaml"), "--dry-run", "--epochs", "2")
    assert dry.returncode == 0 and "--epochs 2" in dry.stdout


@pytest.mark.slow
def test_cli_train_two_ranks_then_jobs_logs_status(tmp_path, cifar_dir):
    state = tmp_path / "state"
    result = torchdeck(
        state,
        "train",
        *quick_spec_args(cifar_dir, "--epochs", "2", "--max-steps", "24"),
        "--name",
        "cli",
        "--output",
        "json",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["state"] == "succeeded" and summary["step"] == 24
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    assert all(r["loss"] is not None and r["samples_per_s"] > 0 for r in summary["ranks"])
    assert [e["epoch"] for e in summary["evals"]] == [1, 2]
    run_id = summary["run_id"]
    assert summary["model_file"].endswith("checkpoints/model.pt")

    jobs = json.loads(torchdeck(state, "jobs", "--output", "json").stdout)
    assert [(j["run_id"], j["state"]) for j in jobs] == [(run_id, "succeeded")]
    # the launcher left the ended run's status in one file, which listing reads instead of the logs
    kept = json.loads((state / "runs" / run_id / "status.json").read_text())
    assert kept == {**jobs[0], "location": kept["location"]} and kept["step"] == 24
    (state / "runs" / run_id / "status.json").write_text(f'{{"run_id": "{run_id}", "state": "no such')  # torn
    again = json.loads(torchdeck(state, "jobs", "--output", "json").stdout)
    assert again == jobs  # worked out again from the run's files, and written whole
    assert json.loads((state / "runs" / run_id / "status.json").read_text())["state"] == "succeeded"
    text = torchdeck(state, "jobs").stdout
    assert run_id in text and "succeeded" in text and "24/24" in text

    logs = torchdeck(state, "logs", run_id[:6], "--rank", "1").stdout.splitlines()
    assert logs[0].startswith("start: resnet-fast")
    assert any(line.startswith("epoch 2 step 24") for line in logs)
    everyone = torchdeck(state, "logs", run_id).stdout
    assert "[rank 0] " in everyone and "[rank 1] " in everyone

    tested = torchdeck(state, "test", "--run", run_id, "--output", "json")
    assert tested.returncode == 0, tested.stderr
    report = json.loads(tested.stdout)
    assert report["images"] > 0 and len(report["per_class"]) == 10
    # the trainer's own last eval, within a point: it runs sharded over the ranks (one image padded in)
    # and in the recipe's precision, the test in fp32 on one process
    assert abs(report["accuracy"] - summary["accuracy"]) < 0.01
    text = torchdeck(state, "test", "--run", run_id).stdout
    assert text.startswith(f"accuracy on {report['images']} test images") and "  airplane " in text


@pytest.mark.slow
def test_detach_reattach_node_metrics_and_stop_leaves_no_process(tmp_path, cifar_dir):
    state = tmp_path / "state"
    result = torchdeck(state, "train", *quick_spec_args(cifar_dir, "--epochs", "30"), "--detach")
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip()
    # A different backend object (as after a console restart) finds the run from its folder.
    backend = LocalBackend(state)
    status = wait_status(backend, run_id, lambda s: s.state is JobState.RUNNING and s.step >= 2, timeout=300)
    assert status.world_size == 2

    nodes = backend.node_metrics(run_id)
    backend.node_metrics(run_id)  # cpu_percent needs two readings
    nodes = backend.node_metrics(run_id)
    assert len(nodes) == 1 and nodes[0].gpu_note.startswith("no GPU") and nodes[0].mem_total_mb > 0
    assert [p.rank for p in nodes[0].processes] == [0, 1] and all(p.rss_mb > 50 for p in nodes[0].processes)

    # the attached progress view reattaches too; Ctrl-C there detaches and leaves the job running
    follow = subprocess.Popen(
        [sys.executable, "-m", "torchdeck", "logs", run_id, "--follow"],
        cwd=REPO,
        env=cli_env(state),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert follow.stdout.readline().startswith("[rank ")
    assert len(run_processes(run_id)) >= 4  # launcher, torchrun, two ranks (and their sh)

    stopped = torchdeck(state, "stop", run_id)
    assert stopped.returncode == 0 and "cancelled" in stopped.stdout
    assert run_processes(run_id) == []
    assert backend.status(run_id).state is JobState.CANCELLED
    assert follow.wait(timeout=10) == 0  # `logs -f` ends with the run
    assert "already cancelled" in torchdeck(state, "stop", run_id).stdout


@pytest.mark.slow
def test_killed_rank_shows_as_a_restart_and_the_job_finishes(tmp_path, cifar_dir):
    backend = LocalBackend(tmp_path / "state")
    # 20 steps an epoch: stopped at step 50, so the restart (from epoch 1's snapshot) has 30 to go; the
    # kill comes at step 21, and a look that comes late still finds the run with steps to go (29 steps
    # take two seconds here)
    spec = JobSpec(name="kill", data_dir=str(cifar_dir), max_restarts=2, trainer=TrainerOptions(epochs=3, max_steps=50))
    run_id = backend.submit(spec)
    wait_status(backend, run_id, lambda s: s.step >= 21, timeout=300)  # into epoch 2: epoch 1's snapshot is saved
    victim = rank_process(run_id, 1)
    now = backend.status(run_id)
    assert now.state is JobState.RUNNING and now.step < 50, f"the run got to its end before rank 1 was killed: {now}"
    victim.send_signal(signal.SIGKILL)
    status = finished(backend, run_id)
    assert status.state is JobState.SUCCEEDED, status
    assert status.restarts == 1 and status.step == status.total_steps == 50

    state = MonitorState()

    async def read_all():
        async for batch in backend.metrics(run_id, follow=False):
            state.ingest(batch)

    asyncio.run(read_all())
    snap = state.snapshot()
    assert snap.restarts == 1 and [r.flag for r in snap.ranks] == ["done", "done"]
    restarted = [line for batch in backend.logs(run_id, rank=1) for line in batch if line.attempt == 1]
    assert any(line.text.startswith("start:") and "restart 1" in line.text for line in restarted)


@pytest.mark.slow
def test_failed_job_says_why_in_one_line(tmp_path):
    state = tmp_path / "state"
    result = torchdeck(state, "train", "--data-dir", str(tmp_path / "missing"), "--max-restarts", "0", "--name", "bad")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("torchdeck: error: bad-") and "failed: rank " in last
    assert "does not exist" in last and "hint: " in last
    status = json.loads(torchdeck(state, "jobs", "--output", "json").stdout)[0]
    assert status["state"] == "failed" and "does not exist" in status["reason"]


def test_gpu_figures_fall_back_to_a_clear_no_gpu():
    """NVML is installed in the test environment but this machine has no
    NVIDIA driver: the node gauges say "no GPU" rather than failing."""
    import pynvml  # nvidia-ml-py, a dev dependency, so this path is the one CI takes

    from torchdeck.backends import gpu

    gpu._state.clear()
    gpus, note = gpu.read_gpus()
    try:
        pynvml.nvmlInit()
        has_gpu = True
    except pynvml.NVMLError:
        has_gpu = False
    if has_gpu:
        assert gpus and all(0 <= g.util_percent <= 100 and g.mem_total_mb > 0 for g in gpus)
    else:
        assert gpus == [] and note == "no GPU"


@pytest.mark.slow
def test_many_short_runs_end_without_a_restart_even_under_load(tmp_path, cifar_dir):
    """A run that finished must not be restarted at its exit (a rank once died after `done`
    with "terminate called without an active exception", and torchrun ran the group again).
    Two 2-rank runs at once (4 ranks on this machine's 2 cores) beside a busy loop on every
    core, where the race showed: each ends SUCCEEDED with restarts 0 and a clean log. (Twelve
    runs in three waves took 206 s of a 20-minute suite, two waves of two 70 s; the fix, an
    immediate exit, is not a matter of luck.)"""
    backend = LocalBackend(tmp_path)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        run_ids = [
            backend.submit(
                JobSpec(
                    name=f"exit{i}",
                    data_dir=str(cifar_dir),
                    max_restarts=1,
                    trainer=TrainerOptions(model="seed-cnn", max_steps=2, batch_size=16),
                )
            )
            for i in range(2)
        ]
        for run_id in run_ids:
            status = finished(backend, run_id, timeout=300)
            text = "".join(line.text + "\n" for batch in backend.logs(run_id) for line in batch)
            assert status.state is JobState.SUCCEEDED, (run_id, status, text[-2000:])
            assert status.restarts == 0, (run_id, text[-2000:])
            assert "terminate called" not in text and text.count("done") >= 2, text[-2000:]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_a_trainer_tools_error_arrives_with_its_message_and_hint(tmp_path, tiny_cifar):
    """Issue 30: the local backend read a tool's error by splitting stderr on 'error: ', so the
    hint was always empty; the tool's schema-1 error line carries both."""
    from torchdeck.backends.errors import BackendError

    backend = LocalBackend(tmp_path / "state")
    spec = JobSpec(data_dir=str(tiny_cifar))
    with pytest.raises(BackendError) as caught:
        backend.test_model(spec, model_file=str(tmp_path / "missing.pt"))
    assert caught.value.message == f"model file {tmp_path / 'missing.pt'} does not exist"
    assert caught.value.hint == "train first, or pass the path the trainer printed"


def test_the_launcher_says_when_it_cannot_record_a_runs_final_status(tmp_path):
    """Issue 30: the launcher swallowed every exception while it wrote the run's final status.
    Here the status file's place is taken by a folder: the launcher says so in its log, and the
    run's status is still worked out from its files."""
    run_dir = tmp_path / "state" / "runs" / "demo-1124-000000"
    run_dir.mkdir(parents=True)
    launch = {"cmd": [sys.executable, "-c", "pass"], "cwd": str(tmp_path), "env": {}, "submitted_at": 0.0}
    (run_dir / "launch.json").write_text(json.dumps(launch))
    (run_dir / "status.json").mkdir()
    done = subprocess.run([sys.executable, "-m", "torchdeck.backends.local_launcher", str(run_dir)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr
    log = (run_dir / "launcher.log").read_text()
    assert "could not record the run's final status" in log and "status.json" in log
    assert LocalBackend(tmp_path / "state").status("demo-1124-000000").state.is_terminal


def test_what_the_launcher_starts_is_the_plan_shown(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("import os\nprint(f\"step 1/1 loss: 1.0 rank {os.environ['RANK']}\")\n")
    backend = LocalBackend(tmp_path / "state")
    entry = Entrypoint(script="train.py", code=str(code), python=sys.executable)
    plan = backend.plan(JobSpec(name="planned", entrypoint=entry))
    text = plan.text()
    assert f"# plan: run {plan.run_id} on the local backend" in text and shlex.join(plan.command) in text
    assert not (tmp_path / "state" / "runs" / plan.run_id).exists()  # a plan starts nothing
    assert backend.submit(plan) == plan.run_id
    launch = json.loads((tmp_path / "state" / "runs" / plan.run_id / "launch.json").read_text())
    assert launch["cmd"] == plan.command and launch["cwd"] == plan.cwd and launch["run_id"] == plan.run_id
    assert {k: v for k, v in launch["env"].items() if k != "TORCHDECK_JOB_STARTED_AT"} == plan.env
    assert finished(backend, plan.run_id).state == JobState.SUCCEEDED
    with pytest.raises(RunIdTaken):  # a plan is applied once: its run id is taken now
        backend.submit(plan)
