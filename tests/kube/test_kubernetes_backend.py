"""The kubernetes backend against kmock (a real HTTP Kubernetes API, see
kube_cluster.py for the gaps closed there), through a kubeconfig and the
official client. The tests play the operator and the kubelet: they create
the pods an operator would, patch their statuses, and script their logs."""

from __future__ import annotations

import asyncio
import calendar
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from kube_cluster import start_cluster, stop_cluster
from kube_jobs import (
    IMAGE,
    NS,
    cluster_cli,
    install,
    install_crd,
    make_pod,
    make_spec,
    metric_line,
    run_two_pods,
    set_conditions,
    set_phase,
    trainjob_owner,
)

from torchdeck.backends.base import JobState
from torchdeck.backends.errors import BackendError, FoundByLabel, RunNotFound
from torchdeck.backends.kubernetes import crds
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.kubernetes.client import api_path
from torchdeck.backends.kubernetes.jobs import api_of
from torchdeck.backends.kubernetes.kinds import JOB_KINDS, TRAINJOB_OVERRIDES
from torchdeck.backends.kubernetes.manifests import RUN_LABEL, render
from torchdeck.backends.kubernetes.streams import PodWatcher
from torchdeck.backends.spec import KINDS
from torchdeck.trainer.metrics import tool_line

IMPORTS = Path(__file__).parent.parent / "data" / "imports"


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_stored_as_rendered(kube_backend, kind):
    install(kube_backend)
    spec = make_spec(cluster={"kind": kind})
    run_id = kube_backend.submit(spec)
    expected = render(spec, run_id, kind)
    for obj in expected.objects:
        stored = kube_backend.client.request("GET", api_path(api_of(obj["kind"]), NS, obj["metadata"]["name"]))
        assert stored["kind"] == obj["kind"] and stored["apiVersion"] == obj["apiVersion"]
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"]
        assert stored["metadata"]["labels"][RUN_LABEL] == run_id
        assert stored["spec"] == obj["spec"]
    status = kube_backend.status(run_id)
    assert status.state is JobState.PENDING and status.world_size == 4 and status.backend == "kubernetes"


@pytest.mark.parametrize("target", JOB_KINDS["trainjob"].targets, ids=lambda t: t.release)
def test_trainjob_is_rendered_for_the_trainer_release_the_cluster_runs(kube_backend, target):
    """The cluster's own TrainJob CRD says where pod settings go; the stored job has them there,
    and its pods are found (by the run label, or on v2.0 by the JobSet's name)."""
    install(kube_backend, kinds=("job",))
    install_crd(kube_backend, target.crd_file)
    run_id = kube_backend.submit(make_spec(cluster={"kind": "trainjob"}))
    stored = kube_backend.client.request(
        "GET", f"apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{run_id}"
    )
    assert set(stored["spec"]) & set(TRAINJOB_OVERRIDES) == {target.pod_overrides}
    assert "'claimName': 'shared'" in repr(stored["spec"][target.pod_overrides])
    assert crds.check(stored, crds.target_schema(target)).problems == []
    labels = (
        {"jobset.sigs.k8s.io/jobset-name": run_id}
        if target.pod_overrides == "podSpecOverrides"
        else {RUN_LABEL: run_id}
    )
    kube_backend.client.request(
        "POST",
        f"api/v1/namespaces/{NS}/pods",
        body={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{run_id}-node-0-0",
                "labels": labels,
                "ownerReferences": [trainjob_owner(kube_backend, run_id)],
            },
            "spec": {"containers": [{"name": "node", "image": IMAGE}]},
            "status": {"phase": "Pending"},
        },
    )
    fresh = KubernetesBackend(kube_backend.kubeconfig)  # another console: learns the selector from the job
    assert fresh.status(run_id).state is JobState.PENDING
    assert [p.name for p in fresh.pods(run_id, NS)] == [f"{run_id}-node-0-0"]


def test_a_cluster_serving_another_version_is_told_which_are_supported(kube_backend):
    """The Training Operator v1 installs an MPIJob CRD that serves v1 only: torchdeck renders the
    MPI Operator's v2beta1, so it says so before creating anything."""
    install(kube_backend, kinds=("job",))
    install_crd(kube_backend, "mpijob-v1-trainer-v1.9.4.yaml")
    with pytest.raises(BackendError) as err:
        kube_backend.submit(make_spec(cluster={"kind": "mpijob"}))
    assert "serves v1; torchdeck renders v2beta1 (Kubeflow MPI Operator v0.8.2)" in err.value.message
    assert "MPI Operator" in err.value.hint
    assert kube_backend.list() == []
    text = kube_backend.plan(make_spec(cluster={"kind": "mpijob"})).text()
    assert "\n# preflight: mpijob: this cluster's mpijobs.kubeflow.org serves v1;" in text


def test_elasticjob_is_submitted_only_where_the_cluster_serves_it(kube_backend):
    install(kube_backend, kinds=("job",))
    with pytest.raises(BackendError) as err:
        kube_backend.submit(make_spec(cluster={"kind": "elasticjob"}))
    assert "ElasticJob is not installed" in err.value.message
    assert "1.22" in err.value.hint and "--kind pytorchjob with cluster.min_nodes" in err.value.hint
    install_crd(kube_backend, "elasticjob-elastic-v0.2.2.yaml")  # a cluster that serves it (an old one)
    run_id = kube_backend.submit(make_spec(cluster={"kind": "elasticjob"}))
    assert kube_backend.status(run_id).state is JobState.PENDING


@pytest.mark.parametrize(
    "setup, kind, words, fix",
    [
        (
            {"kinds": ()},
            "pytorchjob",
            "PyTorchJob is not installed on this cluster (no CRD pytorchjobs.kubeflow.org)",
            "Training Operator v1",
        ),
        ({"pvc_phase": "Pending"}, "job", "PersistentVolumeClaim shared is Pending", "describe pvc"),
        ({"sa": False}, "job", "service account torchdeck-s3 does not exist in training", "iamserviceaccount"),
    ],
)
def test_preflight_stops_a_job_that_cannot_run(kube_backend, setup, kind, words, fix):
    install(kube_backend, **setup)
    with pytest.raises(BackendError) as err:
        kube_backend.submit(make_spec(cluster={"kind": kind}))
    assert words in err.value.message and fix in err.value.hint
    assert kube_backend.list() == []  # nothing was created
    assert kube_backend.client.request("GET", f"apis/batch/v1/namespaces/{NS}/jobs").get("items", []) == []


def test_preflight_missing_namespace_and_gpus_on_a_cpu_pool(kube_backend):
    install(kube_backend, gpu_nodes=1, cpu_nodes=2)
    with pytest.raises(BackendError, match="namespace research does not exist"):
        kube_backend.submit(make_spec(namespace="research"))
    cpu_pool = make_spec(resources={"gpus": 1}, cluster={"node_selector": {"pool": "cpu"}})
    with pytest.raises(BackendError) as err:
        kube_backend.submit(cpu_pool)
    assert "no node can take a pod with 1 GPU(s): 2/3 nodes match cluster.node_selector" in err.value.message
    run_id = kube_backend.submit(make_spec(resources={"gpus": 1}, cluster={"node_selector": {"pool": "gpu"}}))
    assert kube_backend.status(run_id).state is JobState.PENDING


def test_status_follows_the_operator_and_explains_pending_pods(kube_api, kube_backend):
    install(kube_backend)
    run_id = kube_backend.submit(make_spec())
    master = make_pod(kube_backend, run_id, f"{run_id}-master-0", "master", phase="Pending")
    kube_backend.client.request(
        "PATCH",
        f"api/v1/namespaces/{NS}/pods/{master['metadata']['name']}/status",
        body={
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                    }
                ]
            }
        },
    )
    set_conditions(kube_backend, run_id, "Created")
    status = kube_backend.status(run_id)
    assert status.state is JobState.PENDING and "no node has a free GPU" in status.reason
    assert "GPU nodegroup" in status.hint
    kube_api.call(
        kube_api.emulator.script_log,
        NS,
        f"{run_id}-master-0",
        ["starting", metric_line(0, 11, 1.75), metric_line(1, 11, 1.8), metric_line(0, 12, 1.7)],
    )
    set_phase(kube_backend, f"{run_id}-master-0", "Running")
    set_conditions(kube_backend, run_id, "Created", "Running")
    running = kube_backend.status(run_id)
    assert running.state is JobState.RUNNING and (running.step, running.epoch, running.loss) == (12, 1, 1.7)
    # it reads only the log's tail, which the kubelet (and tests/support/kube_cluster.py) serves as asked
    log = f"api/v1/namespaces/{NS}/pods/{run_id}-master-0/log"
    tail = kube_backend.client.request("GET", log, query={"tailLines": 2}, stream=True).data
    assert tail.decode().splitlines() == [metric_line(1, 11, 1.8), metric_line(0, 12, 1.7)]
    set_conditions(
        kube_backend,
        run_id,
        "Created",
        "Failed",
        message="PyTorchJob has failed because it has reached the specified backoff limit",
    )
    failed = kube_backend.status(run_id[:12])  # a unique prefix is enough
    assert failed.state is JobState.FAILED and "backoff limit" in failed.reason


def test_status_on_a_cluster_reads_what_the_local_status_reads(kube_api, kube_backend):
    """Issue 30: one status fold for every backend. The cluster's copy read neither the trainer's
    epoch summaries nor its restart count, and took node 0's other ranks' lines as rank 0's."""
    install(kube_backend)
    run_id = kube_backend.submit(make_spec())
    make_pod(kube_backend, run_id, f"{run_id}-master-0", "master")
    start = {"schema": 1, "event": "start", "rank": 0, "world_size": 4, "time": 1_790_000_000.0, "epochs": 3,
             "total_steps": 30, "restart_count": 2}  # fmt: skip
    summary = {"schema": 1, "event": "epoch", "rank": 0, "world_size": 4, "time": 1_790_000_020.0, "epoch": 2,
               "step": 20, "loss": 0.9}  # fmt: skip
    lines = [json.dumps(start), metric_line(0, 19, 1.1), metric_line(1, 21, 5.0), json.dumps(summary)]
    kube_api.call(kube_api.emulator.script_log, NS, f"{run_id}-master-0", lines)
    set_phase(kube_backend, f"{run_id}-master-0", "Running")
    set_conditions(kube_backend, run_id, "Created", "Running")
    status = kube_backend.status(run_id)
    assert (status.epoch, status.step, status.loss, status.epochs, status.total_steps) == (2, 20, 1.1, 3, 30)
    assert status.restarts >= 2


def test_two_submits_of_one_spec_in_one_second_are_two_runs(kube_backend, monkeypatch):
    """Issue 30: run ids were UTC seconds with no collision handling on a cluster (the second
    submit failed with 409, and a test slept 1.1 s to avoid it). One scheme now, the local one's."""
    from torchdeck.backends import names

    install(kube_backend)
    monkeypatch.setattr(names, "clock", lambda: 1_795_000_000.0)
    ids = [kube_backend.submit(make_spec()) for _ in range(3)]
    assert len(set(ids)) == 3 and ids[1] == ids[0] + "-1" and ids[2] == ids[0] + "-2"
    assert {s.run_id for s in kube_backend.list()} >= set(ids)


def test_list_and_cancel_remove_every_object_of_the_run(kube_backend):
    install(kube_backend)
    first = kube_backend.submit(make_spec(cluster={"kind": "job"}))
    second = kube_backend.submit(make_spec(name="other"))
    assert {s.run_id for s in kube_backend.list()} == {first, second}
    stopped = kube_backend.cancel(first)
    assert stopped.state is JobState.CANCELLED
    assert kube_backend.client.request("GET", f"api/v1/namespaces/{NS}/services").get("items") == []
    assert [s.run_id for s in kube_backend.list()] == [second]
    with pytest.raises(RunNotFound):
        kube_backend.status("nothing-like-it")


def test_status_reads_the_trainers_own_progress_back_from_a_trainjob(kube_backend):
    """Kubeflow Trainer v2.3.0's CRD keeps status.trainerStatus (what rank 0 posted to its server)."""
    install(kube_backend, kinds=("job",))
    install_crd(kube_backend, "trainjob-trainer-v2.3.0.yaml")
    run_id = kube_backend.submit(make_spec(cluster={"kind": "trainjob"}))
    assert kube_backend.status(run_id).trainer_status is None  # nothing posted yet
    posted = {"progressPercentage": 40, "estimatedRemainingSeconds": 12, "lastUpdatedTime": "2026-11-26T05:18:10Z",
              "metrics": [{"name": "step", "value": "4"}, {"name": "loss", "value": "1.2"}]}  # fmt: skip
    kube_backend.client.request(
        "PATCH",
        f"apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{run_id}/status",
        body={"status": {"trainerStatus": posted}},
    )
    status = kube_backend.status(run_id)
    assert status.trainer_status == posted and status.to_dict()["trainer_status"] == posted


def test_stop_of_a_run_that_ended_deletes_what_it_keeps_on_the_cluster(kube_backend):
    install(kube_backend)
    run_id = kube_backend.submit(make_spec())
    set_conditions(kube_backend, run_id, "Succeeded")
    assert kube_backend.status(run_id).state is JobState.SUCCEEDED
    assert kube_backend.discard(run_id) == [f"PyTorchJob/{run_id}"]
    assert kube_backend.list() == []


def test_a_job_made_with_kubectl_is_adopted_and_followed_as_a_run_of_its_own(kube_api, kube_backend):
    """The Training Operator's own example (tests/data/imports/SOURCES.json), created as kubectl does,
    with pods as the operator labels them (job-name, not the run label)."""
    install(kube_backend)
    job = yaml.safe_load((IMPORTS / "pytorchjob-simple.yaml").read_text())
    job["metadata"]["namespace"] = NS
    kube_backend.client.request("POST", api_path(api_of("PyTorchJob"), NS), body=job)
    (listed,) = kube_backend.list()  # not torchdeck's: listed read-only, by its reference, with who made it
    assert (listed.run_id, listed.made_by, listed.found_by_label) == (
        "pytorchjob/training/pytorch-simple",
        "someone else",
        True,
    )
    own = "training.kubeflow.org/job-name"
    make_pod(kube_backend, "pytorch-simple", "pytorch-simple-master-0", "master", own=own)
    make_pod(kube_backend, "pytorch-simple", "pytorch-simple-worker-0", "worker", own=own)
    kube_api.call(kube_api.emulator.script_log, NS, "pytorch-simple-master-0", ["starting", metric_line(0, 7, 1.5)])
    for pod in ("pytorch-simple-master-0", "pytorch-simple-worker-0"):
        set_phase(kube_backend, pod, "Running")
    set_conditions(kube_backend, "pytorch-simple", "Created", "Running")
    with pytest.raises(RunNotFound, match="no PyTorchJob pytorch-simplex in namespace"):
        kube_backend.adopt("pytorchjob", "pytorch-simplex", NS)
    kept: list[object] = []
    spec, notes, run_id = kube_backend.adopt("pytorchjob", "pytorch-simple", NS, kept.append)
    assert run_id == "pytorch-simple" and kept == [spec] and spec.nodes == 2 and notes
    stored = kube_backend.client.request("GET", api_path(api_of("PyTorchJob"), NS, run_id))
    assert stored["metadata"]["labels"][RUN_LABEL] == run_id and stored["spec"] == job["spec"]  # only labelled
    assert kube_backend.status(run_id).found_by_label is False  # adopted here: recorded, by its uid
    # another console (no record of the adoption) finds it by its label, and stops it only when told
    fresh = KubernetesBackend(kube_backend.kubeconfig, namespace=NS)
    assert [s.run_id for s in fresh.list()] == [run_id]
    status = fresh.status(run_id)
    assert status.state is JobState.RUNNING and status.world_size == 2 and status.step == 7
    assert status.found_by_label is True
    assert [p.name for p in fresh.pods(run_id, NS)] == [
        "pytorch-simple-master-0",
        "pytorch-simple-worker-0",
    ]
    assert fresh.run_spec(run_id).entrypoint.script == "mnist.py"
    with pytest.raises(BackendError, match="is torchdeck's run pytorch-simple already"):
        fresh.adopt("pytorchjob", "pytorch-simple", NS)
    with pytest.raises(FoundByLabel):
        fresh.cancel(run_id)
    assert fresh.cancel(run_id, trust_label=True).state is JobState.CANCELLED
    assert fresh.list() == []


def test_logs_and_metrics_follow_every_pod_across_a_restart(kube_api, kube_backend):
    install(kube_backend)
    run_id = kube_backend.submit(make_spec())
    em = kube_api.emulator
    master = ["starting", metric_line(0, 1), metric_line(1, 1)]
    run_two_pods(kube_api, kube_backend, run_id, master, ["starting", metric_line(2, 1), metric_line(3, 1)], False)
    seen: list = []

    async def collect():
        async for batch in kube_backend.metrics(run_id):
            seen.extend(batch)
            if {(e.rank, e.record["step"]) for e in seen} >= {(r, 2) for r in range(4)}:
                return

    def restart_worker():
        time.sleep(1.0)
        # the worker's container crashed and came back: its new log starts over
        kube_api.call(em.script_log, NS, f"{run_id}-worker-0", [metric_line(2, 2), metric_line(3, 2)], ended=False)
        set_phase(kube_backend, f"{run_id}-worker-0", "Running", restarts=1)
        kube_api.call(em.script_log, NS, f"{run_id}-master-0", [metric_line(0, 2), metric_line(1, 2)], ended=False)
        set_phase(kube_backend, f"{run_id}-master-0", "Running", restarts=1)

    threading.Thread(target=restart_worker, daemon=True).start()
    asyncio.run(asyncio.wait_for(collect(), 30))
    assert {e.rank for e in seen} == {0, 1, 2, 3}
    lines = next(b for b in kube_backend.logs(run_id, rank=2) if b)
    assert lines and all(line.rank == 2 for line in lines)
    everything = [line for batch in kube_backend.logs(run_id) for line in batch]
    assert any(line.text == "starting" or line.rank in (0, 2) for line in everything)


def test_pod_watch_relists_on_410_and_resumes_after_a_cut(kube_api, kube_backend):
    install(kube_backend)
    run_id = kube_backend.submit(make_spec())
    em = kube_api.emulator
    kube_api.call(em.fail_next_watch, "gone")
    kube_api.call(em.fail_next_watch, "cut", 1)
    retries: list = []
    watcher = PodWatcher(
        kube_backend.client,
        kube_backend.pod_selector(run_id),
        NS,
        lambda pods: None,
        lambda n, wait, why: retries.append(n),
    )
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    for i in range(3):
        make_pod(kube_backend, run_id, f"{run_id}-worker-{i}", "worker", i, phase="Pending")
    for i in range(3):
        set_phase(kube_backend, f"{run_id}-worker-{i}", "Running")
    set_phase(kube_backend, f"{run_id}-worker-1", "Succeeded")
    deadline = time.monotonic() + 15
    want = {f"{run_id}-worker-0": "Running", f"{run_id}-worker-1": "Succeeded", f"{run_id}-worker-2": "Running"}
    while time.monotonic() < deadline:
        if {n: p.phase for n, p in watcher.pods.items()} == want:
            break
        time.sleep(0.1)
    watcher.stop()
    assert {n: p.phase for n, p in watcher.pods.items()} == want
    assert watcher.relists >= 2  # the first list, and again after 410 Gone
    assert em.watches >= 3  # gone, cut, then the one that stayed


def test_watch_gives_up_after_repeated_failures_with_a_clear_message(tmp_path, monkeypatch):
    running, thread = start_cluster(tmp_path)
    kube_backend = KubernetesBackend(running.kubeconfig)
    stop_cluster(running, thread)  # the cluster goes away
    monkeypatch.setattr("torchdeck.backends.kubernetes.streams.MAX_RETRIES", 2)
    retries: list = []
    watcher = PodWatcher(
        kube_backend.client,
        kube_backend.pod_selector("r"),
        NS,
        lambda pods: None,
        lambda n, wait, why: retries.append((n, wait)),
    )
    watcher.run()  # returns: it gave up
    assert retries == [(1, 0.5), (2, 1.0), (3, 0.0)]
    assert "lost the cluster connection: 2 retries failed" in watcher.error.message


def test_128_worker_pods_are_followed_at_once(kube_api, kube_backend):
    install(kube_backend)
    run_id = kube_backend.submit(make_spec(nodes=128, nproc_per_node=1))
    em = kube_api.emulator
    for i in range(128):
        kube_api.call(em.script_log, NS, f"{run_id}-worker-{i}", [metric_line(i, s) for s in range(1, 6)])
        make_pod(kube_backend, run_id, f"{run_id}-worker-{i}", "worker", i, phase="Succeeded")
    seen = []

    async def collect():
        async for batch in kube_backend.metrics(run_id, follow=False):
            seen.extend(batch)

    asyncio.run(asyncio.wait_for(collect(), 60))
    assert len(seen) == 128 * 5 and {e.rank for e in seen} == set(range(128))


@pytest.mark.slow
def test_cli_trains_lists_and_explains_on_the_cluster(kube_api, kube_backend, tmp_path):
    install(kube_backend)
    torchdeck = cluster_cli(kube_api, tmp_path)

    done = torchdeck(
        "train",
        "--detach",
        "--image",
        IMAGE,
        "--namespace",
        NS,
        "--nodes",
        "2",
        "--set",
        "cluster.pvc=shared",
        "--set",
        "cluster.service_account=torchdeck-s3",
    )
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert re.match(r"^cifar10-\d{4}-\d{6}$", run_id)
    jobs = torchdeck("jobs")
    assert run_id in jobs.stdout and "pending" in jobs.stdout
    missing = torchdeck("train", "--detach", "--image", IMAGE, "--namespace", "nowhere")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert "namespace nowhere does not exist" in missing.stderr and "kubectl create namespace" in missing.stderr
    dry = torchdeck("train", "--dry-run", "--image", IMAGE, "--namespace", "nowhere")  # applies nothing
    assert dry.returncode == 0 and "kind: PyTorchJob" in dry.stdout
    assert (
        "# preflight: nowhere: namespace nowhere does not exist (fix: kubectl create namespace nowhere)" in dry.stdout
    )
    ready = torchdeck("train", "--dry-run", "--image", IMAGE, "--namespace", NS, "--set", "cluster.pvc=shared")
    assert "# preflight: the cluster can run it" in ready.stdout


def test_the_console_monitors_a_cluster_run_like_a_local_one(kube_api, kube_backend, tmp_path):
    from textual.widgets import Static
    from tui_support import wait_for

    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.monitor import MonitorScreen

    install(kube_backend)
    run_id = kube_backend.submit(make_spec())
    em = kube_api.emulator
    for name, role, index, ranks in (
        (f"{run_id}-master-0", "master", 0, (0, 1)),
        (f"{run_id}-worker-0", "worker", 0, (2, 3)),
    ):
        kube_api.call(
            em.script_log,
            NS,
            name,
            [metric_line(r, s, 2.3 - 0.01 * s, host=name, gpu_util=90.0 + r) for s in range(1, 21) for r in ranks],
            rate=80,
            ended=False,
        )
        make_pod(kube_backend, run_id, name, role, index, phase="Running")
    set_conditions(kube_backend, run_id, "Created", "Running")
    settings = Settings(backend="kubernetes", state_dir=tmp_path / "state", refresh_hz=10)

    async def scenario():
        app = make_app(settings, KubernetesBackend(kube_api.kubeconfig), run_id)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
            screen = app.screen
            await wait_for(pilot, lambda: screen.snap.events == 80, what="every rank's lines", timeout=30)
            await wait_for(pilot, lambda: screen.query_one("#ranks").row_count == 4, what="four rank rows")
            line = screen.query_one("#status-line", Static)
            await wait_for(
                pilot,
                lambda: "step 20" in str(line.render()) and "RUNNING" in str(line.render()),
                what="the status line at step 20",
            )
            assert run_id in str(line.render()) and "world 4" in str(line.render())
            table = screen.query_one("#ranks")  # drawn at most four times a second
            await wait_for(
                pilot,
                lambda: [table.get_row_at(i)[1] for i in range(4)] == ["20"] * 4,
                what="every rank at step 20 in the table",
            )
            assert [table.get_row_at(i)[0] for i in range(4)] == ["0", "1", "2", "3"]
            # no NVML and no DCGM exporter on the node: its GPU line is what the ranks on it report
            nodes = screen.query_one("#nodes", Static)
            # (measured once a second, from the snapshot of the time: the first may predate rank 3's line)
            await wait_for(
                pilot,
                lambda: "as the ranks report: r0 90% r1 91% r2 92% r3 93%" in str(nodes.render()),
                what="the node's GPU line",
            )
            assert "cpu-0" in str(nodes.render())

    asyncio.run(scenario())


def play_task_job(kube_backend, kube_api, task, log_lines, succeed=True):
    """Be the Job controller and the kubelet for the next task job: a pod that prints ``log_lines``."""

    def run():
        deadline, jobs = time.monotonic() + 300, list[dict]()  # a bound on a hang, not on the host's speed
        while not jobs:
            assert time.monotonic() < deadline, f"no {task} job was submitted in 300 s"
            jobs = kube_backend.client.request(
                "GET", f"apis/batch/v1/namespaces/{NS}/jobs", query={"labelSelector": f"torchdeck.dev/task={task}"}
            ).get("items", [])
            if not jobs:
                time.sleep(0.1)
        name = jobs[0]["metadata"]["name"]
        pod = f"{name}-x7k2p"
        kube_api.call(kube_api.emulator.script_log, NS, pod, log_lines)
        make_pod(kube_backend, name, pod, phase="Running")
        time.sleep(0.5)
        set_phase(kube_backend, pod, "Succeeded" if succeed else "Failed")
        kube_backend.client.request(
            "PATCH",
            f"apis/batch/v1/namespaces/{NS}/jobs/{name}/status",
            body={
                "status": {
                    "conditions": [
                        {
                            "type": "Complete" if succeed else "Failed",
                            "status": "True",
                            "reason": "Completed" if succeed else "BackoffLimitExceeded",
                        }
                    ]
                }
            },
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_model_test_job_reports_accuracy_per_class(kube_api, kube_backend):
    install(kube_backend)
    result = {
        "model": "resnet-fast",
        "model_file": "/shared/runs/cifar10/model.pt",
        "images": 1000,
        "accuracy": 0.5,
        "loss": 1.4,
        "per_class": {"airplane": {"accuracy": 0.6, "images": 100}, "cat": {"accuracy": 0.4, "images": 100}},
    }
    play_task_job(kube_backend, kube_api, "model-test", ["loading the model", tool_line("evaluate", result)])
    waits: list = []
    got = kube_backend.test_model(make_spec(), progress=waits.append)
    assert got == result and waits[0].startswith("started job training/cifar10-test-")
    job = kube_backend.client.request(
        "GET", f"apis/batch/v1/namespaces/{NS}/jobs", query={"labelSelector": "torchdeck.dev/task=model-test"}
    )["items"][0]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--model-file", "/shared/runs/cifar10/model.pt"] and "--output" in args


@pytest.mark.slow
def test_a_model_on_the_volume_leaves_through_s3_with_the_model_copy_job(kube_api, kube_backend):
    """``model get --run R`` (and ``--from PATH``, a file where the run ran) on a cluster: a model-copy
    job puts the file under the S3 prefix, and fetch_model answers where it went."""
    install(kube_backend)
    run_id = kube_backend.submit(make_spec())
    for location, source in ((None, "/shared/runs/cifar10/model.pt"), ("/shared/other.pt", "/shared/other.pt")):
        target = f"s3://models/torchdeck/{run_id}/model.pt"
        copied = {"source": source, "target": target, "bytes": 1234}
        play_task_job(kube_backend, kube_api, "model-copy", [tool_line("model_file", copied)])
        waits: list[str] = []
        got = kube_backend.fetch_model(run_id, lambda spec: "s3://models/torchdeck/", waits.append, location=location)
        assert got == target and waits[0] == f"{source} is on the cluster's volume: copying it to {target} with a job"
        jobs = kube_backend.client.request(
            "GET", f"apis/batch/v1/namespaces/{NS}/jobs", query={"labelSelector": "torchdeck.dev/task=model-copy"}
        )["items"]
        job = max(jobs, key=lambda j: j["metadata"]["name"])
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args == ["--copy", source, target]
        for old in jobs:
            kube_backend.client.request("DELETE", f"apis/batch/v1/namespaces/{NS}/jobs/{old['metadata']['name']}")
    # one in S3 already is fetched from there, with no job
    assert kube_backend.fetch_model(run_id, lambda spec: "unused", location="s3://models/m.pt") == "s3://models/m.pt"


@pytest.mark.slow
def test_data_prep_failure_is_one_line_with_the_tools_message_and_hint(kube_api, kube_backend, tmp_path):
    """The pod's log is the real tool's output (run here against a port nothing answers): its
    schema-1 error line gives the message and the hint (issue 30: the hint slot was always empty)."""
    install(kube_backend)
    tool = subprocess.run(
        [sys.executable, "-m", "torchdeck.trainer.data", "--data-dir", str(tmp_path / "d"), "--url",
         "http://127.0.0.1:9/cifar-10-python.tar.gz"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert tool.returncode != 0
    play_task_job(kube_backend, kube_api, "data-prep", (tool.stderr + tool.stdout).splitlines(), succeed=False)
    with pytest.raises(BackendError) as err:
        kube_backend.prepare_data(make_spec())
    assert err.value.message.startswith("cannot download CIFAR-10") and err.value.hint
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["pytorchjob", "job", "trainjob"])
def test_a_cluster_runs_spec_and_model_file_are_read_back(kube_backend, kind):
    install(kube_backend)
    spec = make_spec(cluster={"kind": kind}, model_file="s3://models/cifar10.pt")
    run_id = kube_backend.submit(spec)
    again, model_file = KubernetesBackend(kube_backend.kubeconfig).model_file_of(run_id)
    assert model_file == "s3://models/cifar10.pt"
    assert (again.image, again.namespace, again.cluster.pvc, again.cluster.data_dir) == (
        IMAGE,
        NS,
        "shared",
        "/shared/data",
    )
    assert again.cluster.service_account == "torchdeck-s3"


@pytest.mark.slow
def test_the_console_shows_the_model_tests_accuracy_per_class(kube_api, kube_backend, tmp_path):
    from textual.widgets import Static
    from tui_support import wait_for

    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.home import HomeScreen
    from torchdeck.tui.screens.model_test import ModelTestScreen

    install(kube_backend)
    run_id = kube_backend.submit(make_spec())
    set_conditions(kube_backend, run_id, "Created", "Succeeded")
    result = {
        "model": "resnet-fast",
        "model_file": "/shared/runs/cifar10/model.pt",
        "images": 1000,
        "accuracy": 0.715,
        "loss": 0.9,
        "per_class": {"airplane": {"accuracy": 0.81, "images": 100}, "bird": {"accuracy": 0.52, "images": 100}},
    }
    play_task_job(kube_backend, kube_api, "model-test", [tool_line("evaluate", result)])

    async def scenario():
        app = make_app(
            Settings(backend="kubernetes", state_dir=tmp_path / "state"), KubernetesBackend(kube_api.kubeconfig)
        )
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.statuses, what="runs")
            await pilot.press("t")
            await wait_for(pilot, lambda: isinstance(app.screen, ModelTestScreen), what="the test screen")
            screen = app.screen
            await wait_for(pilot, lambda: screen.result is not None, what="the test result", timeout=30)
            shown = app.screen.query_one("#test-body", Static)

            def drawn() -> str:
                return "\n".join(strip.text for strip in shown.render_lines(shown.region.reset_offset))

            await wait_for(pilot, lambda: "accuracy" in drawn(), what="the result drawn")
            text = drawn()
            assert "accuracy 71.5% on 1000 test images" in text
            assert "airplane" in text and "81.0%" in text and "bird" in text and "52.0%" in text

    asyncio.run(scenario())


DCGM_TEXT = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA A10G",Hostname="gpu-0"} 97
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA A10G",Hostname="gpu-0"} 18200
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA A10G",Hostname="gpu-0"} 4300
"""


def test_node_figures_from_metrics_server_and_the_dcgm_exporter(kube_api, kube_backend):
    install(kube_backend, gpu_nodes=1, cpu_nodes=1)
    run_id = kube_backend.submit(make_spec(resources={"gpus": 1}))
    make_pod(kube_backend, run_id, f"{run_id}-master-0", "master", node="gpu-0")
    make_pod(kube_backend, run_id, f"{run_id}-worker-0", "worker", node="cpu-0")
    for node, cpu, mem in (("gpu-0", "6", "30Gi"), ("cpu-0", "2000m", "8Gi")):
        kube_backend.client.request(
            "POST",
            "apis/metrics.k8s.io/v1beta1/nodes",
            body={
                "apiVersion": "metrics.k8s.io/v1beta1",
                "kind": "NodeMetrics",
                "metadata": {"name": node},
                "window": "15s",
                "usage": {"cpu": cpu, "memory": mem},
            },
        )
    kube_api.emulator.namespaces.add("gpu-operator")
    kube_backend.client.request(
        "POST",
        "api/v1/namespaces/gpu-operator/pods",
        body={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "dcgm-exporter-abcde",
                "labels": {"app.kubernetes.io/name": "dcgm-exporter"},
                "ownerReferences": [  # the GPU Operator's DaemonSet, as on a real cluster
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": "nvidia-dcgm-exporter",
                        "uid": "5e1f0c2a-dcgm",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "nodeName": "gpu-0",
                "containers": [{"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter"}],
            },
            "status": {"phase": "Running"},
        },
    )
    kube_api.emulator.proxied[("gpu-operator", "dcgm-exporter-abcde:9400", "/metrics")] = DCGM_TEXT
    cpu_node, gpu_node = kube_backend.node_metrics(run_id)
    assert gpu_node.name == "gpu-0" and gpu_node.cpu_percent == pytest.approx(75.0)
    assert gpu_node.mem_used_mb == pytest.approx(30 * 1024) and gpu_node.mem_total_mb == pytest.approx(60 * 1024)
    (gpu,) = gpu_node.gpus
    assert (gpu.name, gpu.util_percent, gpu.mem_used_mb, gpu.mem_total_mb) == ("NVIDIA A10G", 97.0, 18200.0, 22500.0)
    assert cpu_node.name == "cpu-0" and cpu_node.cpu_percent == pytest.approx(25.0) and cpu_node.gpus == []
    assert cpu_node.gpu_note == "no GPU"


def test_submitted_objects_go_into_the_ledger_and_cleanup_deletes_them(kube_api, tmp_path):
    from torchdeck.backends.eks.teardown import Teardown, plan_cleanup
    from torchdeck.backends.ledger import Ledger

    kube_backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(kube_backend)
    run_id = kube_backend.submit(make_spec(cluster={"kind": "job"}))
    rows = Ledger(tmp_path / "state").resources()
    paths = sorted(r.detail["path"] for r in rows)
    assert paths == [f"api/v1/namespaces/{NS}/services/{run_id}", f"apis/batch/v1/namespaces/{NS}/jobs/{run_id}"]
    assert {r.kind for r in rows} == {"k8s-object"} and all(r.made for r in rows)

    progress = asyncio.run(
        _collect(Teardown(tmp_path / "state", lambda region: None, poll_s=0.01).run(plan_cleanup(rows)))
    )
    assert [p.message.rsplit(": ", 1)[-1] for p in progress[:-1]] == ["deleted", "deleted"]
    assert progress[-1].message == "all 2 in the plan are deleted"
    assert Ledger(tmp_path / "state").resources() == []
    with pytest.raises(BackendError):
        kube_backend.status(run_id)


async def _collect(progress):
    return [p async for p in progress]


def failed_on_a_lost_node(kube_api, kube_backend, still_running=lambda run_id: None):
    """A PyTorchJob whose master pod ran on cpu-1 until the node lifecycle controller marked cpu-1
    NotReady, tainted it unreachable and ended the pod (DisruptionTarget); rank 0 said it saved a
    checkpoint at step 10 and got to step 14. ``still_running`` is called while it runs."""
    run_id = kube_backend.submit(make_spec())
    lines = [metric_line(0, step, 2.0 - step / 100) for step in range(1, 15)]
    lines.insert(10, json.dumps({"schema": 1, "event": "checkpoint", "rank": 0, "time": 1_790_000_010.5, "step": 10}))
    kube_api.call(kube_api.emulator.script_log, NS, f"{run_id}-master-0", lines)
    kube_api.call(kube_api.emulator.script_log, NS, f"{run_id}-worker-0", [metric_line(1, 14)])
    make_pod(kube_backend, run_id, f"{run_id}-master-0", "master", node="cpu-1")
    make_pod(kube_backend, run_id, f"{run_id}-worker-0", "worker", node="cpu-0")
    set_conditions(kube_backend, run_id, "Created", "Running")
    still_running(run_id)

    # what the node lifecycle controller writes when a kubelet stops reporting
    lost = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
    lost["message"] = "Kubelet stopped posting node status."
    kube_backend.client.request("PATCH", "api/v1/nodes/cpu-1/status", body={"status": {"conditions": [lost]}})
    taint = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-26T06:00:00Z"}
    kube_backend.client.request("PATCH", "api/v1/nodes/cpu-1", body={"spec": {"taints": [taint]}})
    disrupted = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
    disrupted["message"] = "Taint manager: deleting due to NoExecute taint"
    kube_backend.client.request(
        "PATCH",
        f"api/v1/namespaces/{NS}/pods/{run_id}-master-0/status",
        body={"status": {"phase": "Failed", "conditions": [disrupted]}},
    )
    set_conditions(kube_backend, run_id, "Created", "Failed", message="PyTorchJob has failed")

    return run_id


def test_a_run_that_failed_on_a_bad_node_is_named_and_resumed_off_it(kube_api, tmp_path):
    """The node lifecycle controller marks a node NotReady and taints it unreachable, and ends the
    pod on it (DisruptionTarget): status names the node and why, and ``torchdeck resume RUN
    --avoid-node NODE`` makes a run of the same lineage, its pods kept off that node, resuming
    from the same checkpoint folder; the steps after the last checkpoint are said to be lost."""
    kube_backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(kube_backend, cpu_nodes=2)
    torchdeck = cluster_cli(kube_api, tmp_path)

    def still_running(run_id):
        still = torchdeck("resume", run_id)
        assert still.returncode == 1 and f"{run_id} is still running" in still.stderr, still.stderr

    run_id = failed_on_a_lost_node(kube_api, kube_backend, still_running)
    status = kube_backend.status(run_id)
    assert list(status.bad_nodes) == ["cpu-1"]  # cpu-0 is healthy: not named
    why = status.bad_nodes["cpu-1"]
    assert why.startswith("NotReady (Kubelet stopped posting node status.)") and "unreachable" not in why
    assert "ended its pod (DeletionByTaintManager: Taint manager: deleting due to NoExecute taint)" in why
    shown = torchdeck("status", run_id)
    assert f"bad node: cpu-1: {why}" in shown.stdout
    assert f"resume: torchdeck resume {run_id} --avoid-node cpu-1" in shown.stdout
    assert json.loads(torchdeck("status", run_id, "--output", "json").stdout)["bad_nodes"] == {"cpu-1": why}

    bad = torchdeck("resume", run_id, "--avoid-node", "Bad_Node")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "--avoid-node: cluster.avoid_nodes: node must be a DNS-1123 name" in bad.stderr
    resumed = torchdeck("resume", run_id, "--avoid-node", "cpu-1", "--detach")
    assert resumed.returncode == 0, resumed.stderr
    new_id = resumed.stdout.strip()
    assert (
        f"torchdeck: {new_id} resumes {run_id} from step 10 (the run got to 14: 4 steps lost), kept off cpu-1"
        in resumed.stderr
    )
    job = kube_backend.client.request("GET", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{new_id}")
    assert job["metadata"]["labels"]["torchdeck.dev/resumes"] == run_id
    first = kube_backend.client.request("GET", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}")
    for replica in ("Master", "Worker"):
        pod = job["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
        term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert term == [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["cpu-1"]}]}]
        before = first["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["containers"][0]["args"]
        assert pod["containers"][0]["args"] == before  # the same checkpoint folder: it resumes there
    assert kube_backend.run_spec(new_id).resumes == run_id
    again = torchdeck("resume", run_id)
    assert again.returncode == 1 and f"{run_id} is being resumed already, as {new_id}" in again.stderr

    # a stopped run's job is deleted: its spec was kept when it was submitted, and it resumes from that
    assert torchdeck("stop", new_id).returncode == 0
    plan = torchdeck("resume", new_id, "--avoid-node", "cpu-2", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    (pytorchjob,) = [o for o in yaml.safe_load_all(plan.stdout) if o and o["kind"] == "PyTorchJob"]
    assert pytorchjob["metadata"]["labels"]["torchdeck.dev/resumes"] == new_id
    avoided = pytorchjob["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"]
    terms = avoided["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # what it avoided, and the new one: a requirement each (the API takes one value for metadata.name)
    assert [f["values"] for f in terms[0]["matchFields"]] == [["cpu-1"], ["cpu-2"]]


def lose_a_node_under(kube_backend, run_id, node="cpu-1", pod_ready="False"):
    """What the node lifecycle controller writes when NODE's kubelet stops reporting (the node's Ready
    Unknown since 06:00 UTC), and what it then writes on the pod there (Ready POD_READY)."""
    lost = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
    lost |= {"message": "Kubelet stopped posting node status.", "lastTransitionTime": "2026-11-26T06:00:00Z"}
    kube_backend.client.request("PATCH", f"api/v1/nodes/{node}/status", body={"status": {"conditions": [lost]}})
    set_pod_ready(kube_backend, f"{run_id}-worker-0", pod_ready)


def set_pod_ready(kube_backend, pod, status):
    ready = {"type": "Ready", "status": status, "reason": "NodeNotReady" if status == "False" else ""}
    kube_backend.client.request(
        "PATCH", f"api/v1/namespaces/{NS}/pods/{pod}/status", body={"status": {"conditions": [ready]}}
    )


def running_on_two_nodes(kube_backend):
    run_id = kube_backend.submit(make_spec())
    make_pod(kube_backend, run_id, f"{run_id}-master-0", "master", node="cpu-0")
    make_pod(kube_backend, run_id, f"{run_id}-worker-0", "worker", node="cpu-1")
    set_conditions(kube_backend, run_id, "Created", "Running")
    return run_id


LOST_SINCE = time.strftime("%H:%M:%S", time.localtime(calendar.timegm((2026, 11, 26, 6, 0, 0))))


def test_a_node_lost_under_a_live_run_is_named_with_since_when_and_the_ranks_it_held(kube_api, tmp_path):
    """While the run goes on: the node lifecycle controller marks cpu-1 NotReady (Unknown: its kubelet
    stopped reporting) and the pod on it not Ready; status names the node, since when, and the ranks
    it held, and offers no resume yet (the run is live). A healthy run reads no node at all."""
    kube_backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(kube_backend, cpu_nodes=2)
    torchdeck = cluster_cli(kube_api, tmp_path)
    run_id = running_on_two_nodes(kube_backend)
    assert kube_backend.status(run_id).bad_nodes == {}
    lose_a_node_under(kube_backend, run_id, pod_ready="True")
    assert kube_backend.status(run_id).bad_nodes == {}  # its pods do not show it yet: no node is read
    lose_a_node_under(kube_backend, run_id)
    status = kube_backend.status(run_id)
    assert status.state is JobState.RUNNING and list(status.bad_nodes) == ["cpu-1"]
    why = status.bad_nodes["cpu-1"]
    assert why.startswith(f"NotReady since {LOST_SINCE} (") and "s) (Kubelet stopped posting node status.)" in why
    assert why.endswith(f"it held ranks 2-3 (pod {run_id}-worker-0)"), why  # two processes a node
    shown = torchdeck("status", run_id)
    assert f"node lost: cpu-1: NotReady since {LOST_SINCE}" in shown.stdout and "resume:" not in shown.stdout
    listed = torchdeck("jobs")
    assert f"node lost under {run_id}: cpu-1: NotReady since {LOST_SINCE}" in listed.stdout, listed.stdout
    (row,) = [r for r in json.loads(torchdeck("jobs", "--output", "json").stdout) if r["run_id"] == run_id]
    assert list(row["bad_nodes"]) == ["cpu-1"]


def test_the_monitor_says_a_node_was_lost_while_the_run_goes_on_and_stops_saying_it_once_it_is_back(kube_api, tmp_path):
    from textual.widgets import Static
    from tui_support import wait_for

    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.monitor import MonitorScreen

    kube_backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(kube_backend, cpu_nodes=2)
    run_id = running_on_two_nodes(kube_backend)
    lose_a_node_under(kube_backend, run_id)
    settings = Settings(backend="kubernetes", state_dir=tmp_path / "state", refresh_hz=10)

    async def scenario():
        app = make_app(settings, KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state"), run_id)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
            offer = app.screen.query_one("#offer", Static)
            await wait_for(pilot, lambda: "cpu-1" in str(offer.render()), what="the lost node", timeout=30)
            text = str(offer.render())
            assert text.startswith(f"node lost cpu-1: NotReady since {LOST_SINCE}") and "r resumes" not in text
            assert offer.has_class("-shown")
            back = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready"}
            kube_backend.client.request("PATCH", "api/v1/nodes/cpu-1/status", body={"status": {"conditions": [back]}})
            set_pod_ready(kube_backend, f"{run_id}-worker-0", "True")
            await wait_for(pilot, lambda: not offer.has_class("-shown"), what="the pane gone", timeout=30)

    asyncio.run(scenario())


def test_the_monitor_offers_to_resume_a_run_that_failed_on_a_bad_node(kube_api, tmp_path):
    """The monitor of a run that failed on a NotReady node says which node and why, and that r
    resumes it elsewhere from step 10 with 4 steps lost; r, then y, starts the run kept off that
    node and the monitor follows it."""
    from textual.widgets import Static
    from tui_support import wait_for

    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.confirm import ConfirmScreen
    from torchdeck.tui.screens.monitor import MonitorScreen

    kube_backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(kube_backend, cpu_nodes=2)
    run_id = failed_on_a_lost_node(kube_api, kube_backend)
    settings = Settings(backend="kubernetes", state_dir=tmp_path / "state", refresh_hz=10)

    async def scenario():
        app = make_app(settings, KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state"), run_id)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
            screen = app.screen
            offer = screen.query_one("#offer", Static)
            await wait_for(pilot, lambda: "cpu-1" in str(offer.render()), what="the offer", timeout=30)
            # (drawn again with each status: the steps once the metrics have said them)
            await wait_for(pilot, lambda: "from step 10" in str(offer.render()), what="the checkpoint's step")
            text = str(offer.render())
            assert "failed on a bad node cpu-1: NotReady (Kubelet stopped posting node status.)" in text
            assert "r resumes it on other nodes from step 10 (the run got to 14: 4 steps lost)" in text
            await pilot.press("r")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
            question = app.screen.question  # what it would submit, before anything is made
            assert "from step 10 (the run got to 14: 4 steps lost), the built-in trainer" in question
            assert f"namespace {NS}, pytorchjob, service account torchdeck-s3, claim shared, kept off cpu-1" in question
            assert f"image {IMAGE}" in question and "found by its label only" not in question
            await pilot.press("y")
            await wait_for(
                pilot,
                lambda: isinstance(app.screen, MonitorScreen) and app.screen.run_id != run_id,
                what="the monitor of the new run",
                timeout=30,
            )
            new_id = app.screen.run_id
            spec = kube_backend.run_spec(new_id)
            assert spec.resumes == run_id and spec.cluster.avoid_nodes == ["cpu-1"]

    asyncio.run(scenario())


def play_gate(kube_api, kube_backend, result, planted=None):
    """Be the Training Operator and the kubelets for the health gate's PyTorchJob: a pod on each of
    cpu-0, cpu-1, cpu-2, rank 0's log ending with the check's answer, then Succeeded. ``planted``:
    another answer, printed last by a pod that someone else made with the gate's labels."""
    from torchdeck.trainer.metrics import tool_line

    def run():
        deadline, jobs = time.monotonic() + 300, list[dict]()  # a bound on a hang, not on the host's speed
        while not jobs:
            assert time.monotonic() < deadline, "no health gate's PyTorchJob was submitted in 300 s"
            jobs = kube_backend.client.request(
                "GET",
                f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs",
                query={"labelSelector": "torchdeck.dev/job=cifar10-gate"},
            ).get("items", [])
            time.sleep(0.1)
        name = jobs[0]["metadata"]["name"]
        for i, (role, index) in enumerate((("master", 0), ("worker", 0), ("worker", 1))):
            pod = f"{name}-{role}-{index}"
            lines = [f"[rank{i}]:" + tool_line("check", result)] if i == 0 else ["[rank1]:done"]
            kube_api.call(kube_api.emulator.script_log, NS, pod, lines)
            make_pod(kube_backend, name, pod, role, index, phase="Succeeded", node=f"cpu-{i}")
        if planted is not None:
            kube_api.call(kube_api.emulator.script_log, NS, f"{name}-master-9", [tool_line("check", planted)])
            make_pod(kube_backend, name, f"{name}-master-9", "master", 0, phase="Succeeded", node="cpu-0", owner=None)
        set_conditions(kube_backend, name, "Created", "Succeeded")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_health_gate_names_the_node_behind_the_slow_links_and_cordons_it_when_asked(kube_api, tmp_path):
    """torchdeck check on a cluster: the gate runs as a PyTorchJob of the run's spec (here played
    by the test as the operator would run it), its answer is read from rank 0's log, the gate is
    deleted, and the node in every slow pair is named; --cordon --yes cordons it. A run that then
    fails on that node names it bad, with the gate's words."""
    from torchdeck.trainer.check import bus_bandwidth

    kube_backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(kube_backend, cpu_nodes=3)
    link = {"bytes": 16 << 20, "time_s": 0.01, "algbw_gbps": 1.6, "busbw_gbps": bus_bandwidth(1.6, 2)}
    slow = {**link, "busbw_gbps": 0.2}
    nodes = [{"index": i, "node": f"cpu-{i}", "host": f"pod-{i}", "ranks": [i], "intra": None,
              "gpus": {"count": 0, "note": "NVML not loaded"}, "dcgm": {"ran": False}, "efa": {"devices": []}}
             for i in range(3)]  # fmt: skip
    pairs = [{"a": "cpu-0", "b": "cpu-1", "result": link}, {"a": "cpu-0", "b": "cpu-2", "result": slow},
             {"a": "cpu-1", "b": "cpu-2", "result": slow}]  # fmt: skip
    answer = {"backend": "gloo", "world_size": 3, "hosts": ["pod-0", "pod-1", "pod-2"], "rows": [link],
              "nodes": nodes, "pairs": pairs}  # fmt: skip
    player = play_gate(kube_api, kube_backend, answer)
    torchdeck = cluster_cli(kube_api, tmp_path)
    args = ["--image", IMAGE, "--namespace", NS, "--nodes", "3", "--nproc-per-node", "1",
            "--set", "cluster.pvc=shared", "--set", "cluster.service_account=torchdeck-s3"]  # fmt: skip
    done = torchdeck("check", *args, "--cordon", "--yes")
    player.join(5)
    assert done.returncode == 0, done.stderr
    assert "falls short: cpu-2: its link to cpu-0 reaches 0.20 GB/s, under half the other links'" in done.stdout
    assert "cpu-0 <-> cpu-1: 1.600 GB/s" in done.stdout and "cordoned cpu-2" in done.stdout
    assert "falls short: cpu-0" not in done.stdout and "falls short: cpu-1" not in done.stdout
    assert "health gate cifar10-gate-" in done.stderr  # what it waited for, as it went
    assert kube_backend.client.request("GET", "api/v1/nodes/cpu-2")["spec"]["unschedulable"] is True
    assert "unschedulable" not in kube_backend.client.request("GET", "api/v1/nodes/cpu-1").get("spec", {})
    gates = kube_backend.client.request("GET", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs")["items"]
    assert gates == []  # the gate is deleted once read
    kept = json.loads((tmp_path / "state" / "check" / "latest.json").read_text())
    assert list(kept["short"]) == ["cpu-2"] and kept["gate"].startswith("cifar10-gate-")

    # train --check: the gate first; the run is planned again, kept off the node that fell short
    player = play_gate(kube_api, kube_backend, answer)
    gated = torchdeck("train", *args, "--check", "--detach")
    player.join(5)
    assert gated.returncode == 0, gated.stderr
    assert "health gate: cpu-2 fell short: its link to cpu-0" in gated.stderr
    assert "health gate: the run is kept off cpu-2" in gated.stderr
    gated_id = gated.stdout.strip()
    assert kube_backend.run_spec(gated_id).cluster.avoid_nodes == ["cpu-2"]
    job = kube_backend.client.request("GET", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{gated_id}")
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["cpu-2"]}]}
    ]
    kube_backend.discard(gated_id)

    run_id = kube_backend.submit(make_spec())
    make_pod(kube_backend, run_id, f"{run_id}-master-0", "master", phase="Failed", node="cpu-2")
    set_conditions(kube_backend, run_id, "Created", "Failed", message="PyTorchJob has failed")
    why = kube_backend.status(run_id).bad_nodes["cpu-2"]
    assert why.startswith("cordoned; fell short in torchdeck's health gate (") and "its link to cpu-0" in why

    # the node mended: a command says it is open again, and says so of one that was not cordoned
    undone = torchdeck("check", "--uncordon", "cpu-2", "--uncordon", "cpu-1")
    assert undone.returncode == 0, undone.stderr
    assert undone.stdout.splitlines() == [
        "uncordoned cpu-2: new pods may be scheduled there again",
        "cpu-1 was not cordoned: nothing to undo",
    ]
    assert kube_backend.client.request("GET", "api/v1/nodes/cpu-2")["spec"]["unschedulable"] is False
    missing = torchdeck("check", "--uncordon", "cpu-9")
    assert missing.returncode != 0 and "no node cpu-9 in this cluster" in missing.stderr


def test_the_health_gate_believes_only_its_own_rank_0_and_names_only_its_own_pods_nodes(kube_api, tmp_path):
    """Issue 51: a pod someone planted with the gate's labels prints an answer of its own (cpu-0 and
    cpu-1 slow), and rank 0's answer names a node no gate pod ran on (the control plane, behind every
    slow pair): the planted answer is not read, the unknown node is dropped, and nothing is named or
    cordoned on either's word."""
    from torchdeck.trainer.check import bus_bandwidth

    kube_backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(kube_backend, cpu_nodes=3)
    kube_backend.client.request("POST", "api/v1/nodes", body={"apiVersion": "v1", "kind": "Node",
                                "metadata": {"name": "control-plane"}})  # fmt: skip
    link = {"bytes": 16 << 20, "time_s": 0.01, "algbw_gbps": 1.6, "busbw_gbps": bus_bandwidth(1.6, 2)}
    slow = {**link, "busbw_gbps": 0.2}
    nodes = [{"index": i, "node": node, "host": f"pod-{i}", "ranks": [i], "intra": None,
              "gpus": {"count": 0}, "dcgm": {"ran": False}, "efa": {"devices": []}}
             for i, node in enumerate(("cpu-0", "cpu-1", "cpu-2", "control-plane"))]  # fmt: skip
    pairs = [{"a": a, "b": b, "result": slow if "control-plane" in (a, b) else link}
             for a, b in (("cpu-0", "cpu-1"), ("cpu-0", "cpu-2"), ("cpu-1", "cpu-2"), ("cpu-0", "control-plane"),
                          ("cpu-1", "control-plane"), ("cpu-2", "control-plane"))]  # fmt: skip
    answer = {"backend": "gloo", "world_size": 3, "hosts": ["pod-0"], "rows": [link], "nodes": nodes, "pairs": pairs}
    lie = {**answer, "pairs": [{**p, "result": slow if "cpu-0" in (p["a"], p["b"]) else link} for p in pairs[:3]]}
    player = play_gate(kube_api, kube_backend, answer, planted=lie)
    torchdeck = cluster_cli(kube_api, tmp_path)
    args = ["--image", IMAGE, "--namespace", NS, "--nodes", "3", "--nproc-per-node", "1",
            "--set", "cluster.pvc=shared", "--set", "cluster.service_account=torchdeck-s3"]  # fmt: skip
    done = torchdeck("check", *args, "--cordon", "--yes", "--output", "json")
    player.join(5)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["short"] == {} and result["dropped"] == 4
    assert sorted(n["node"] for n in result["nodes"]) == ["cpu-0", "cpu-1", "cpu-2"]
    for node in ("cpu-0", "cpu-1", "cpu-2", "control-plane"):
        assert "unschedulable" not in kube_backend.client.request("GET", f"api/v1/nodes/{node}").get("spec", {})


def test_a_rank_made_again_on_another_node_is_followed_back_into_the_run_and_compare_draws_the_recovery(
    kube_api, tmp_path
):
    """Ranks 2-3 were on cpu-1 (the attempt's start says where each rank is); their pod is made again
    on cpu-2: status says it is coming back, not yet in. Then the next attempt starts, ranks 2-3 on
    cpu-2, resumed from step 36 after the run got to 40: status and compare say so in a line."""
    kube_backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(kube_backend, cpu_nodes=3)
    torchdeck = cluster_cli(kube_api, tmp_path)
    run_id = kube_backend.submit(make_spec())
    master, worker = f"{run_id}-master-0", f"{run_id}-worker-0"
    begun = time.time() - 600  # the first attempt began before the worker's new pod was made

    def start(attempt, nodes, at):
        line = {"schema": 1, "event": "start", "rank": 0, "world_size": 2, "time": at, "restart_count": attempt}
        return json.dumps(line | {"total_steps": 80, "nodes": nodes})

    first = [start(0, ["cpu-0", "cpu-0", "cpu-1", "cpu-1"], begun)]
    first += [metric_line(0, s, world_size=2, time=begun + s) for s in range(1, 41)]
    em = kube_api.emulator
    kube_api.call(em.script_log, NS, master, first)
    make_pod(kube_backend, run_id, master, "master", node="cpu-0")
    make_pod(kube_backend, run_id, worker, "worker", node="cpu-2", phase="Pending")
    set_conditions(kube_backend, run_id, "Created", "Running")
    status = kube_backend.status(run_id)
    assert status.coming_back == [
        f"ranks 2-3's pod {worker} made again on node cpu-2 (it was on node cpu-1): Pending, not back in the run yet"
    ], status.coming_back
    assert status.recovery == [] and status.restarts == 0
    assert f"coming back: ranks 2-3's pod {worker} made again on node cpu-2" in torchdeck("status", run_id).stdout

    back = begun + 100
    resumed = {"schema": 1, "event": "resume", "rank": 0, "time": back + 1, "step": 36, "restart_count": 1}
    again = [start(1, ["cpu-0", "cpu-0", "cpu-2", "cpu-2"], back), json.dumps(resumed)]
    again += [metric_line(0, s, world_size=2, time=back + s) for s in range(37, 45)]
    kube_api.call(em.script_log, NS, master, first + again)
    set_phase(kube_backend, worker, "Running")
    status = kube_backend.status(run_id)
    clock = time.strftime("%H:%M:%S", time.localtime(back))
    said = f"attempt 2 at {clock}: ranks 2-3 moved from node cpu-1 to node cpu-2; resumed from step 36 (the run got to 40: 4 steps lost)"
    assert status.recovery == [said] and status.coming_back == [] and status.restarts == 1, status
    assert f"recovery: {said}" in torchdeck("status", run_id).stdout

    other = kube_backend.submit(make_spec())
    kube_api.call(em.script_log, NS, f"{other}-master-0", [metric_line(0, s, world_size=1) for s in range(1, 5)])
    make_pod(kube_backend, other, f"{other}-master-0", "master", node="cpu-0")
    compared = torchdeck("compare", run_id, other)
    assert compared.returncode == 0, compared.stderr
    assert any(line.startswith("restarts") and line.split()[1:3] == ["1", "0"] for line in compared.stdout.splitlines())
    assert any(
        line.startswith("steps lost") and line.split()[2:4] == ["4", "0*"] for line in compared.stdout.splitlines()
    ), compared.stdout
    label = compared.stdout.split()[0]  # the run's short name, as the table heads it
    assert f"recovered {label}: {said}" in compared.stdout, compared.stdout
    (figures, _) = json.loads(torchdeck("compare", run_id, other, "--output", "json").stdout)["runs"]
    assert figures["steps_lost"] == 4 and figures["recoveries"][0]["moved"] == {
        "2": ["cpu-1", "cpu-2"],
        "3": ["cpu-1", "cpu-2"],
    }
    # hundreds of steps later the attempt's start has scrolled out of the lines a status reads: what
    # was learnt is kept on the job, and said again
    later = [metric_line(0, s, world_size=2, time=back + s, restart_count=1) for s in range(45, 400)]
    kube_api.call(em.script_log, NS, master, later)
    job = kube_backend.client.request("GET", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}")
    assert [a["attempt"] for a in json.loads(job["metadata"]["annotations"]["torchdeck.dev/recovery"])["attempts"]] == [
        1
    ]
    status = kube_backend.status(run_id)
    assert status.recovery == [said] and status.restarts == 1, status


def test_a_stopped_runs_last_status_and_curve_are_kept_so_status_and_a_resumed_runs_lineage_still_read_it(
    kube_api, tmp_path
):
    """``stop`` deletes the job and its pods (their logs go with them): the run's last status and its
    digest are kept first, so ``status`` still says where it stood, and ``compare`` of the run that
    resumed it draws one line from the first step, with the steps the restart did again counted."""
    kube_backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(kube_backend, cpu_nodes=2)
    torchdeck = cluster_cli(kube_api, tmp_path)
    run_id = kube_backend.submit(make_spec())
    master = f"{run_id}-master-0"
    lines = [metric_line(0, s, world_size=2, loss=3.0 - s / 100) for s in range(1, 31)]
    lines.append(json.dumps({"schema": 1, "event": "checkpoint", "rank": 0, "step": 25, "time": time.time()}))
    kube_api.call(kube_api.emulator.script_log, NS, master, lines)
    make_pod(kube_backend, run_id, master, "master", node="cpu-0")
    set_conditions(kube_backend, run_id, "Created", "Running")
    stopped = torchdeck("stop", run_id)
    assert stopped.returncode == 0 and f"{run_id} cancelled" in stopped.stdout, stopped.stdout + stopped.stderr
    assert kube_backend.client.request("GET", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs")["items"] == []
    kept = json.loads(torchdeck("status", run_id, "--output", "json").stdout)
    assert kept["state"] == "cancelled" and kept["step"] == 30 and kept["reason"].startswith("stopped by the user at")
    assert "cancelled" in torchdeck("status", run_id).stdout

    later = kube_backend.submit(make_spec(resumes=run_id))
    resumed = [json.dumps({"schema": 1, "event": "resume", "rank": 0, "step": 25, "time": time.time()})]
    resumed += [metric_line(0, s, world_size=2, loss=1.0) for s in range(26, 41)]
    kube_api.call(kube_api.emulator.script_log, NS, f"{later}-master-0", resumed)
    make_pod(kube_backend, later, f"{later}-master-0", "master", node="cpu-1")
    compared = torchdeck("compare", later, run_id, "--output", "json")
    assert compared.returncode == 0, compared.stderr
    first, _ = json.loads(compared.stdout)["runs"]
    assert first["restarts"] == [run_id] and first["steps_lost"] == 5, first


def test_a_listed_runs_row_says_how_far_it_got_running_and_how_it_finished_after_its_pods_are_gone(kube_api, tmp_path):
    """Issue 55's first point: ``jobs`` showed an ended cluster run at epoch 0, step 0, no loss, no
    accuracy, while ``status`` said 2/2, 128/128, 0.689, 82.8%. A row reads the run as status does (its
    lowest rank's newest lines); an ended run's figures are kept on its job, and still said once its
    pods, and their logs, are gone."""
    kube_backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(kube_backend, cpu_nodes=2)
    torchdeck = cluster_cli(kube_api, tmp_path)
    live, ended = kube_backend.submit(make_spec()), kube_backend.submit(make_spec())
    em = kube_api.emulator
    kube_api.call(em.script_log, NS, f"{live}-master-0", [metric_line(0, s, loss=2.0 - s / 100) for s in range(1, 13)])
    make_pod(kube_backend, live, f"{live}-master-0", "master", node="cpu-0")
    set_conditions(kube_backend, live, "Created", "Running")
    start = {"schema": 1, "event": "start", "rank": 0, "time": time.time(), "epochs": 2, "total_steps": 128}
    done = [json.dumps(start), *(metric_line(0, s, loss=0.689, epoch=2) for s in range(1, 129))]
    done.append(
        json.dumps({"schema": 1, "event": "eval", "rank": 0, "time": time.time(), "epoch": 2, "accuracy": 0.828})
    )
    kube_api.call(em.script_log, NS, f"{ended}-master-0", done)
    make_pod(kube_backend, ended, f"{ended}-master-0", "master", node="cpu-1", phase="Succeeded")
    set_conditions(kube_backend, ended, "Created", "Succeeded")

    def rows() -> dict[str, dict]:
        listed = torchdeck("jobs", "--output", "json")
        assert listed.returncode == 0, listed.stderr
        return {r["run_id"]: r for r in json.loads(listed.stdout)}

    first = rows()
    assert (first[live]["step"], first[live]["loss"]) == (12, pytest.approx(1.88)), first[live]
    figures = {k: first[ended][k] for k in ("epoch", "epochs", "step", "total_steps", "loss", "accuracy")}
    assert figures == {"epoch": 2, "epochs": 2, "step": 128, "total_steps": 128, "loss": 0.689, "accuracy": 0.828}
    table = torchdeck("jobs").stdout
    assert any(ended in line and "128" in line and "0.689" in line and "82.8%" in line for line in table.splitlines())
    kube_backend.client.request("DELETE", f"api/v1/namespaces/{NS}/pods/{ended}-master-0")
    again = rows()[ended]
    assert {k: again[k] for k in figures} == figures
    assert kube_backend.status(ended).step == 128  # status too, from what was kept
