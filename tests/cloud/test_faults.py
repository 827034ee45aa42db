"""Issue 16, deliverable 3: faults injected mid-flight, and what survives them.
Others live beside the code they break: a watch cut and resumed
(test_kubernetes_backend.py), a killed rank restarting from its checkpoint
(test_distributed.py, test_local_backend.py), an interrupted create and cleanup
resuming (test_eks_cluster.py, test_cloud_lifecycle.py), the ledger lost
(test_cloud_lifecycle.py). docs/RELIABILITY.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from eks_support import REGION, cli, everything_left, make_plan
from eks_support import run_progress as run_all

from torchdeck.backends.eks.access import ClusterRecord
from torchdeck.backends.eks.create import create_native
from torchdeck.backends.eks.session import AwsSession
from torchdeck.backends.eks.storage import create_storage
from torchdeck.backends.eks.storage_plan import StoragePlan
from torchdeck.backends.errors import BackendError
from torchdeck.backends.ledger import Ledger

pytestmark = pytest.mark.slow  # the fast lane (./scripts/test --fast) leaves these out

BURSTS = {  # service, action, error code, HTTP status, calls a fault-free run makes
    "create": [
        ("eks", "CreateCluster", "InternalFailure", 500, 1),
        ("iam", "CreateRole", "Throttling", 400, 4),
        ("ec2", "CreateLaunchTemplate", "RequestLimitExceeded", 400, 2),
        ("eks", "CreateNodegroup", "ServiceUnavailableException", 503, 2),
    ],
    "storage": [
        ("efs", "CreateFileSystem", "InternalServerError", 500, 1),
        ("efs", "CreateMountTarget", "ThrottlingException", 400, 2),
    ],
    "cleanup": [
        ("eks", "DeleteNodegroup", "ServiceUnavailableException", 503, 2),
        ("efs", "DeleteFileSystem", "InternalServerError", 500, 1),
        ("iam", "DeleteRole", "Throttling", 400, 4),
        ("eks", "DeleteCluster", "InternalFailure", 500, 1),
    ],
}


def test_aws_500s_and_throttles_in_bursts_are_retried_through_create_storage_and_cleanup(
    tmp_path, aws_env, moto_gaps, vpc, kube
):
    """Each call below answers an error twice in a row, as AWS does in an outage or under a
    rate limit, then succeeds: everything is made, then everything is deleted, and each faulted
    action was called its usual number of times plus the two refused (retried, not repeated)."""
    aws = AwsSession(REGION)
    state = tmp_path / "state"
    record = ClusterRecord.open(state, "demo", REGION)

    def burst(phase: str) -> None:
        moto_gaps.calls.clear()
        for service, action, code, status, _ in BURSTS[phase]:
            moto_gaps.fail(service, action, code, times=2, status=status)

    def retried(phase: str) -> dict[str, int]:
        """Calls that were not exactly their successes plus the two refusals (retried, not repeated)."""
        return {
            f"{s}.{a}": moto_gaps.calls[(s, a)] for s, a, _, _, n in BURSTS[phase] if moto_gaps.calls[(s, a)] != n + 2
        }

    burst("create")
    run_all(create_native(aws, make_plan(vpc), record, kubeconfig=tmp_path / "kc", poll_s=0.01))
    assert retried("create") == {}
    burst("storage")
    run_all(
        create_storage(
            aws, StoragePlan("demo", REGION, bucket="torchdeck-models-demo"), record, poll_s=0.01, timeout_s=5
        )
    )
    assert retried("storage") == {}
    assert everything_left(aws)  # made

    burst("cleanup")
    code, _, err = cli("cleanup", "--yes", state=state)
    assert code == 0, err
    assert retried("cleanup") == {}
    assert everything_left(aws) == []
    assert Ledger(state).resources() == []


def test_a_damaged_ledger_is_one_line_and_is_never_replaced(tmp_path, aws_env):
    state = tmp_path / "state"
    ledger = Ledger(state)
    ledger.add("s3-bucket", "models", scope="demo", region=REGION)
    ledger.path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)  # a torn write
    damaged = ledger.path.read_bytes()
    for argv in (["resources"], ["cleanup", "--dry-run"]):
        code, _, err = cli(*argv, state=state)
        assert code != 0 and err.count("\n") == 1, err
        assert "the ledger is damaged" in err and f"mv {ledger.path} {ledger.path}.damaged" in err
    assert ledger.path.read_bytes() == damaged  # kept for a person to look at


def test_a_ledger_held_by_another_torchdeck_waits_then_says_so(tmp_path):
    """A second torchdeck (another process) in the middle of a write: a short hold is waited out and
    nothing is forgotten; a long one is one line saying who holds it."""
    state = tmp_path / "state"
    Ledger(state).add("s3-bucket", "first", scope="demo", region=REGION)
    holder = (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1]); c.execute('BEGIN EXCLUSIVE')\n"
        "print('held', flush=True); time.sleep(float(sys.argv[2])); c.rollback()\n"
    )

    def hold(seconds: float) -> subprocess.Popen:
        other = subprocess.Popen(
            [sys.executable, "-c", holder, str(state / "ledger.sqlite"), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert other.stdout.readline().strip() == "held"
        return other

    other = hold(1.0)
    Ledger(state, busy_timeout_s=20).add("s3-bucket", "second", scope="demo", region=REGION)  # waits for it
    other.wait(timeout=30)
    other = hold(30.0)
    try:
        with pytest.raises(BackendError) as caught:
            Ledger(state, busy_timeout_s=0.3).add("s3-bucket", "third", scope="demo", region=REGION)
        assert "another torchdeck has held the ledger" in str(caught.value) and "\n" not in str(caught.value)
    finally:
        other.kill()
        other.wait(timeout=30)
    assert sorted(r.ident for r in Ledger(state).resources()) == ["first", "second"]
    Ledger(state).add("s3-bucket", "third", scope="demo", region=REGION)
    assert sorted(r.ident for r in Ledger(state).resources()) == ["first", "second", "third"]


def test_a_killed_torchrun_fails_the_run_leaves_no_rank_and_resume_continues(tmp_path, cifar_dir):
    """SIGKILL to torchrun itself (the agent, not a rank): it cannot stop its ranks, so the launcher
    does; the run says what happened and how to go on, and --resume starts from the last snapshot."""
    import signal

    import psutil
    from local_runs import finished, left_running, rank_process, run_processes, wait_status

    from torchdeck.backends.base import JobState
    from torchdeck.backends.local import LocalBackend
    from torchdeck.backends.spec import JobSpec, TrainerOptions

    backend = LocalBackend(tmp_path / "state")
    # 20 steps an epoch; the resumed run goes from epoch 1's snapshot to step 50. The kill comes at step
    # 21, and a look that comes late still finds the run with steps to go (29 steps take two seconds here)
    spec = JobSpec(
        name="agent", data_dir=str(cifar_dir), max_restarts=2, trainer=TrainerOptions(epochs=3, max_steps=50)
    )
    run_id = backend.submit(spec)
    wait_status(backend, run_id, lambda s: s.step >= 21, timeout=300)  # into epoch 2: epoch 1's snapshot is saved
    ranks = [rank_process(run_id, rank) for rank in (0, 1)]
    (agent,) = [
        p
        for p in run_processes(run_id)
        if "torch.distributed.run" in " ".join(p.cmdline()) or "torchrun" in " ".join(p.cmdline()[:2])
    ]
    now = backend.status(run_id)
    assert now.state is JobState.RUNNING and now.step < 50, f"the run got to its end before torchrun was killed: {now}"
    agent.send_signal(signal.SIGKILL)
    status = finished(backend, run_id)
    assert status.state is JobState.FAILED, status
    assert "torchrun was killed by SIGKILL" in status.reason and "were stopped" in status.reason, status.reason
    assert f"torchdeck resume {run_id}" in status.hint
    _, alive = psutil.wait_procs(ranks, timeout=10)
    assert alive == [] and left_running(run_id) == []  # no rank (nor helper) goes on, unwatched

    # two consoles resume it at the same moment: one run, and the other is told which
    from local_runs import cli_env

    moved = subprocess.run(
        [sys.executable, "-m", "torchdeck", "resume", run_id, "--avoid-node", "node-2"],
        env=cli_env(tmp_path / "state"),
        capture_output=True,
        text=True,
    )
    assert moved.returncode == 1 and "a local run has one node, this machine" in moved.stderr, moved
    consoles = [  # `resume RUN`, and the older spelling, `train --resume RUN`
        subprocess.Popen(
            [sys.executable, "-m", "torchdeck", *command, run_id, "--detach"],
            env=cli_env(tmp_path / "state"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in (["resume"], ["train", "--resume"])
    ]
    answers = sorted((c.wait(timeout=120), *c.communicate()) for c in consoles)
    (ok, resumed, told), (refused, _, said) = answers
    resumed = resumed.strip()
    assert ok == 0 and refused == 1, answers
    assert said.strip() == (
        f"torchdeck: error: {run_id} is being resumed already, as {resumed} (hint: `torchdeck monitor {resumed}`)"
    )
    before = [json.loads(line) for line in (tmp_path / "state" / "runs" / run_id / "metrics" / "rank-0.jsonl").open()]
    saved = max(r["step"] for r in before if r["event"] == "checkpoint")
    got_to = max(r["step"] for r in before if r["event"] == "step")
    lost = got_to - saved
    assert f"torchdeck: {resumed} resumes {run_id} from step {saved} (the run got to {got_to}: {lost} steps" in told
    assert backend.run_spec(resumed).resumes == run_id
    assert [s.run_id for s in backend.list() if s.run_id != run_id] == [resumed]
    done = finished(backend, resumed)
    assert done.state is JobState.SUCCEEDED and done.step == 50, done
    lines = [line.text for batch in backend.logs(resumed, rank=0) for line in batch]
    assert any(text.startswith("resume:") or "resumed" in text for text in lines), lines[:20]

    # compare draws the two as one line: the first run's steps up to the snapshot, then the restart's
    shown = subprocess.run(
        [sys.executable, "-m", "torchdeck", "compare", resumed, run_id, "--output", "json"],
        env=cli_env(tmp_path / "state"),
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, shown.stderr
    line, alone = json.loads(shown.stdout)["runs"]
    assert line["restarts"] == [run_id] and alone["restarts"] == []
    assert line["steps_lost"] == lost and line["steps"] == 50
    steps = line["curve"]["step"]
    assert steps == sorted(steps) and steps[0] < saved < steps[-1]
    assert line["wall_s"] > alone["wall_s"]  # from the first run's start


def test_the_api_server_killed_and_restarted_while_the_monitor_follows_a_run(tmp_path):
    """The API server the console talks to dies mid-run (every watch and log stream cut, its port
    refusing) and comes back on the same port 3 s later. Meanwhile, through another API server of
    the same cluster, both pods finish. The monitor's feed (backend.follow, as the monitor screen
    reads it) reconnects, gets every line exactly once and in order, and ends: the watch saw the
    pods finish while it was away."""
    import asyncio
    import threading
    import time

    from kube_cluster import start_cluster, stop_cluster
    from kube_jobs import NS, install, make_pod, make_spec, metric_line, set_phase

    from torchdeck.backends.kubernetes.backend import KubernetesBackend
    from torchdeck.monitor.state import MonitorState

    cluster, thread = start_cluster(tmp_path)
    cluster.emulator.namespaces.add(NS)
    try:
        backend, side = KubernetesBackend(cluster.kubeconfig), KubernetesBackend(cluster.side_kubeconfig)
        install(side)
        run_id = backend.submit(make_spec())
        steps = 120  # 3 s of log per pod at 40 lines a second
        pods = {f"{run_id}-master-0": 0, f"{run_id}-worker-0": 2}  # pod -> the rank its lines are
        for pod, rank in pods.items():
            lines = [metric_line(rank, step, loss=3.0 - step / 100) for step in range(1, steps + 1)]
            cluster.call(cluster.emulator.script_log, NS, pod, lines, rate=40)
        make_pod(side, run_id, f"{run_id}-master-0", "master", phase="Running")
        make_pod(side, run_id, f"{run_id}-worker-0", "worker", 0, phase="Running")
        seen: dict[int, list[int]] = {0: [], 2: []}
        notes: list[str] = []
        state = MonitorState()

        async def monitor():
            async for events, lines in backend.follow(run_id):
                state.ingest(events)
                for event in events:
                    seen[event.rank].append(event.record["step"])
                notes.extend(line.text for line in lines if line.text.startswith("[torchdeck]"))

        def outage():
            while min(len(v) for v in seen.values()) < 15:  # the monitor is following both
                time.sleep(0.02)
            cluster.kill_api()
            time.sleep(3.0)  # every line is written meanwhile, then both pods finish
            for pod in pods:
                set_phase(side, pod, "Succeeded")
            cluster.revive_api()

        breaker = threading.Thread(target=outage, daemon=True)
        breaker.start()
        asyncio.run(asyncio.wait_for(monitor(), 60))  # ends only once the watch has seen both finish
        breaker.join(10)
    finally:
        stop_cluster(cluster, thread)
    assert seen == {0: list(range(1, steps + 1)), 2: list(range(1, steps + 1))}  # none missed, none twice
    assert all(len(state.ranks[r].loss_curve.points()[0]) == steps for r in (0, 2))
    assert any("lost the pod watch" in note for note in notes), notes  # the user was told
    assert not any("broke off" in note for note in notes), notes


def test_two_consoles_stop_one_run_and_a_console_killed_as_it_starts_one_leaves_no_orphan(tmp_path):
    """Two consoles press stop on the same run at once: both are answered, the run is stopped
    once, no process of it is left. A console killed just after it started a run's launcher (the
    launcher runs, the console never recorded it): the run is seen running, and stop ends it.
    A console killed before it started the launcher: the run says it never started."""
    import json
    import signal
    import time

    from local_runs import cli_env, left_running, run_processes, wait_status

    from torchdeck.backends.base import JobState
    from torchdeck.backends.local import LocalBackend

    state, code = tmp_path / "state", tmp_path / "project"
    code.mkdir()
    (code / "train.py").write_text(
        "import time\nfor i in range(100000):\n    print(f'step {i} loss {1 / (i + 1):.4f}', flush=True)\n"
        "    time.sleep(0.05)\n"
    )
    env = cli_env(state)
    backend = LocalBackend(state)

    def console(*argv: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "torchdeck", *argv],
            env=env,
            cwd=code,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    started = console("train", "train.py", "--python", sys.executable, "--nproc-per-node", "2", "--detach")
    assert started.wait(120) == 0, started.communicate()
    run_id = started.communicate()[0].strip()
    wait_status(backend, run_id, lambda s: s.state is JobState.RUNNING, timeout=60)
    stops = [console("stop", run_id) for _ in range(2)]
    answers = [(c.wait(60), *c.communicate()) for c in stops]
    assert [a[0] for a in answers] == [0, 0], answers
    assert backend.status(run_id).state is JobState.CANCELLED
    assert left_running(run_id) == []

    # what a console killed right after starting the launcher leaves: the launcher, no pid.json of its
    # writing (the launcher is started here as the console starts it, and no console records it)
    launched = console("train", "train.py", "--python", sys.executable, "--detach")
    assert launched.wait(120) == 0
    model = backend.runs_dir / launched.communicate()[0].strip()
    backend.cancel(model.name)
    orphan = backend.runs_dir / "orphan-1123-000000"
    orphan.mkdir()
    for name in ("launch.json", "spec.yaml"):
        text = (model / name).read_text().replace(model.name, orphan.name)
        (orphan / name).write_text(text)
    (orphan / "metrics").mkdir()
    launch_env = {**env, "TORCHDECK_RUN_ID": orphan.name}
    subprocess.Popen(
        [sys.executable, "-m", "torchdeck.backends.local_launcher", str(orphan)],
        env=launch_env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    status = wait_status(backend, orphan.name, lambda s: s.state is JobState.RUNNING, timeout=60)
    assert status.state is JobState.RUNNING
    stopped = console("stop", orphan.name)
    assert stopped.wait(60) == 0, stopped.communicate()
    assert left_running(orphan.name) == []
    assert backend.status(orphan.name).state is JobState.CANCELLED

    # killed before it started the launcher: a run folder with its launch record and nothing running
    never = backend.runs_dir / "never-1123-000000"
    never.mkdir()
    launch = json.loads((orphan / "launch.json").read_text().replace(orphan.name, never.name))
    (never / "launch.json").write_text(json.dumps({**launch, "submitted_at": time.time() - 30}))
    status = backend.status(never.name)
    assert status.state is JobState.FAILED and "it never started" in status.reason

    # and consoles killed at any moment while they start runs: every run that is running can be stopped
    for delay in (0.2, 0.5, 0.8, 1.1, 1.4):
        killed = console("train", "train.py", "--python", sys.executable, "--detach")
        time.sleep(delay)
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)

    def settled() -> bool:
        """Each run has its launcher's pid.json, or no process of it runs: no launcher is still starting
        where a stop cannot see it, however slowly this host starts one."""
        return all(
            (backend.runs_dir / s.run_id / "pid.json").exists() or not run_processes(s.run_id) for s in backend.list()
        )

    deadline = time.monotonic() + 300
    while not settled():
        assert time.monotonic() < deadline, "a launcher a killed console started wrote no pid.json in 300 s"
        time.sleep(0.05)
    for status in backend.list():
        backend.cancel(status.run_id)
    for status in backend.list():
        assert left_running(status.run_id) == [], status.run_id
        assert status.state.is_terminal


def test_the_checkpoint_folder_made_unwritable_mid_run_fails_in_one_line_and_keeps_the_last(tmp_path, cifar_dir):
    """A whole local run; after its first snapshot its checkpoint folder becomes unwritable (immutable
    for root, who ignores modes; mode 0555 for anyone else). The run fails with rank 0's one-line
    reason naming the snapshot kept, and that snapshot loads."""
    import os
    import time

    from local_runs import finished, left_running

    from torchdeck.backends.base import JobState
    from torchdeck.backends.local import LocalBackend
    from torchdeck.backends.spec import JobSpec, TrainerOptions
    from torchdeck.trainer import checkpoint

    folder = tmp_path / "ckpt"
    backend = LocalBackend(tmp_path / "state")
    trainer = TrainerOptions(epochs=3, checkpoint_every=5)
    spec = JobSpec(name="ro", data_dir=str(cifar_dir), max_restarts=0, checkpoint_dir=str(folder), trainer=trainer)
    run_id = backend.submit(spec)
    deadline = time.monotonic() + 120
    while not list(folder.glob("ckpt-*.pt")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(folder.glob("ckpt-*.pt")), backend.status(run_id)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(folder)], check=True)
    else:
        folder.chmod(0o555)
    try:
        probe = folder / "probe"
        with pytest.raises(OSError):
            probe.write_text("x")  # unwritable indeed
        status = finished(backend, run_id)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)
    assert status.state is JobState.FAILED, status
    assert status.reason.startswith("rank 0: cannot write snapshot ckpt-"), status.reason
    assert "\n" not in status.reason and "stays, and a restart resumes from it" in status.reason
    assert "make the folder writable" in status.hint
    kept = status.reason.split("; ")[1].split()[0]
    loaded = checkpoint.load_newest(folder)
    assert loaded.path is not None and loaded.path.name == kept and loaded.state["step"] % 5 == 0
    assert left_running(run_id) == []
