"""Issue 33, submitting through Kueue's queues, against kmock with Kueue's own CRDs installed
(kubernetes-sigs/kueue v0.19.2, manifests/crds/): every job kind and the task Jobs are created
suspended with the queue-name label where each kind's schema has them (checked against the
operators' real CRDs), the pods never carry the label, and the preflight refuses, in one line with
the fix, what would keep a job waiting forever: no Kueue, no such LocalQueue (naming the ones
there), a LocalQueue whose ClusterQueue is missing, a stopped ClusterQueue, one with no quota for
what the job asks. ``import`` carries the label over; an ElasticJob cannot be queued."""

from __future__ import annotations

import pytest
from kube_jobs import NS, cluster_cli, install, install_crd, make_spec, set_conditions, their_job

from torchdeck.backends.base import JobState
from torchdeck.backends.errors import BackendError, SpecError
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.kubernetes.client import api_path
from torchdeck.backends.kubernetes.importing import import_manifest
from torchdeck.backends.kubernetes.jobs import api_of
from torchdeck.backends.kubernetes.manifests import QUEUE_LABEL, render, render_task
from torchdeck.backends.kubernetes.queues import queue_findings
from torchdeck.backends.kubernetes.validation import validate_manifests
from torchdeck.monitor.state import RowFilter, place_cells

KUEUE = "apis/kueue.x-k8s.io/v1beta2"
QUEUED_KINDS = ("pytorchjob", "trainjob", "mpijob", "job")


MANAGED = ("batch/job", "kubeflow.org/pytorchjob", "kubeflow.org/mpijob", "jobset.x-k8s.io/jobset",
           "trainer.kubeflow.org/trainjob")  # fmt: skip
"""The integrations the real cluster's Kueue runs with (scripts/cluster/kubecluster/components.py, checked against
this by tests/unit/test_kubecluster.py): every kind torchdeck queues."""
UPSTREAM_DEFAULT = ("batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/raycluster", "ray.io/rayservice",
                    "jobset.x-k8s.io/jobset", "workload.codeflare.dev/appwrapper", "trainer.kubeflow.org/trainjob",
                    "pod", "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset")  # fmt: skip
"""Kueue v0.19.2's own config/components/manager/controller_manager_config.yaml: kubeflow.org/pytorchjob
is commented out there (Training Operator v1 support is deprecated)."""


def kueue_config(kube_backend, frameworks):
    """Kueue's configuration as its manifests install it: the ConfigMap kueue-system/kueue-manager-config."""
    config = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nintegrations:\n  frameworks:\n"
    config += "".join(f"  - {f!r}\n" for f in frameworks)
    kube_backend.client.request(
        "POST", "api/v1/namespaces/kueue-system/configmaps",
        body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config"},
              "data": {"controller_manager_config.yaml": config}},
    )  # fmt: skip


def with_kueue(
    kube_backend,
    local="team-a",
    cluster="shared-cq",
    covered=("cpu", "memory"),
    stop=None,
    quota="64",
    cohort=None,
    frameworks=MANAGED,
):
    for kind in ("localqueues", "clusterqueues", "resourceflavors", "workloads"):
        install_crd(kube_backend, f"{kind}-kueue-v0.19.2.yaml")
    if frameworks is not None:
        kueue_config(kube_backend, frameworks)
    client = kube_backend.client
    client.request(
        "POST", f"{KUEUE}/resourceflavors",
        body={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
    )  # fmt: skip
    cq_spec = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(covered),
                "flavors": [{"name": "default", "resources": [{"name": r, "nominalQuota": quota} for r in covered]}],
            }
        ],
    }
    if stop:
        cq_spec["stopPolicy"] = stop
    if cohort:
        cq_spec["cohortName"] = cohort
    client.request(
        "POST", f"{KUEUE}/clusterqueues",
        body={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cluster},
              "spec": cq_spec},
    )  # fmt: skip
    client.request(
        "POST", f"{KUEUE}/namespaces/{NS}/localqueues",
        body={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": local},
              "spec": {"clusterQueue": cluster}},
    )  # fmt: skip


@pytest.mark.parametrize("kind", QUEUED_KINDS)
def test_each_kind_is_submitted_suspended_with_the_queue_label_and_its_pods_without(kube_backend, kind):
    install(kube_backend)
    with_kueue(kube_backend)
    spec = make_spec(cluster={"kind": kind, "queue": "team-a"})
    rendered = render(spec, "queued-1", kind)
    assert validate_manifests(rendered).problems == []  # suspend where the operator's own schema has it
    run_id = kube_backend.submit(spec)
    main = render(spec, run_id, kind).main
    stored = kube_backend.client.request("GET", api_path(api_of(main["kind"]), NS, run_id))
    assert stored["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    held = stored["spec"]["runPolicy"] if kind in ("pytorchjob", "mpijob") else stored["spec"]
    assert held["suspend"] is True
    assert QUEUE_LABEL not in str(stored["spec"])  # the pods are the job's: Kueue never queues them apart
    unqueued = render(make_spec(cluster={"kind": kind}), "plain-1", kind).main
    assert QUEUE_LABEL not in unqueued["metadata"]["labels"] and "suspend" not in str(unqueued["spec"])


def test_the_task_jobs_go_through_the_queue_too() -> None:
    spec = make_spec(cluster={"queue": "team-a"})
    for task in ("model-test", "data-prep"):
        job = render_task(spec, task, f"{task}-1").main
        assert job["metadata"]["labels"][QUEUE_LABEL] == "team-a" and job["spec"]["suspend"] is True


@pytest.mark.parametrize(
    ("setup", "words", "fix"),
    [
        ({"kueue": False}, "Kueue is not installed on this cluster", "kubectl apply --server-side"),
        ({"local": "team-b"}, "no LocalQueue team-a in namespace training", "the LocalQueues in training: team-b"),
        ({"cluster_missing": True}, "points at ClusterQueue gone, which does not exist", "admin"),
        ({"stop": "Hold"}, "ClusterQueue shared-cq is stopped (Hold)", "stopPolicy"),
        ({"gpus": 1}, "ClusterQueue shared-cq has no quota for nvidia.com/gpu", "nvidia.com/gpu quota"),
    ],
)
def test_the_preflight_refuses_a_queue_the_job_would_wait_in_forever(kube_backend, setup, words, fix):
    install(kube_backend, gpu_nodes=1)
    if setup.get("kueue", True):
        with_kueue(
            kube_backend,
            local=setup.get("local", "team-a"),
            cluster="gone" if setup.get("cluster_missing") else "shared-cq",
            stop=setup.get("stop"),
        )
        if setup.get("cluster_missing"):
            kube_backend.client.request("DELETE", f"{KUEUE}/clusterqueues/gone")
    spec = make_spec(cluster={"queue": "team-a"}, resources={"gpus": setup.get("gpus", 0)})
    with pytest.raises(BackendError) as err:
        kube_backend.submit(spec)
    assert words in err.value.message and fix in err.value.hint
    assert kube_backend.list() == []  # nothing was created


@pytest.mark.parametrize(
    ("resources", "words"),
    [
        ({"cpu": "3"}, "the job asks 6 cpu in all, more than ClusterQueue shared-cq can ever admit (4 cpu)"),
        ({"memory": "3Gi"}, "the job asks 6.0 GiB memory in all, more than ClusterQueue shared-cq can ever admit"),
    ],
)
def test_a_job_larger_than_its_queues_whole_quota_is_refused_with_the_quota(kube_backend, resources, words):
    install(kube_backend)
    with_kueue(kube_backend, quota={"cpu": "4", "memory": "4Gi"}[next(iter(resources))])
    with pytest.raises(BackendError) as err:
        kube_backend.submit(make_spec(cluster={"queue": "team-a"}, resources=resources))
    assert words in err.value.message and "ask for less" in err.value.hint
    assert kube_backend.list() == []
    # what fits (two pods of 2 cpu in a quota of 4) is not refused; nor is a queue that may borrow
    # from its cohort without a limit (what the cohort lends is not its to say)
    assert queue_findings(kube_backend.client, make_spec(cluster={"queue": "team-a"}, resources={"cpu": "2"}))[0] == []


def test_an_mpijobs_launcher_counts_against_the_quota_as_the_manifest_asks_it() -> None:
    from torchdeck.backends.kubernetes.queues import job_requests

    workers = job_requests(make_spec(resources={"cpu": "2", "memory": "1Gi"}))
    mpi = job_requests(make_spec(cluster={"kind": "mpijob"}, resources={"cpu": "2", "memory": "1Gi"}))
    launcher = render(make_spec(cluster={"kind": "mpijob"}), "cifar10-1").main["spec"]["mpiReplicaSpecs"]["Launcher"]
    asks = launcher["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert asks == {"cpu": "250m", "memory": "256Mi"}
    assert mpi == {"cpu": workers["cpu"] + 0.25, "memory": workers["memory"] + 256 * 2**20}


def test_a_queue_in_a_cohort_that_may_borrow_without_limit_is_not_judged_on_its_own_quota(kube_backend):
    install(kube_backend)
    with_kueue(kube_backend, quota="1", cohort="everyone")
    spec = make_spec(cluster={"queue": "team-a"}, resources={"cpu": "3"})
    assert queue_findings(kube_backend.client, spec)[0] == []


def test_a_priority_class_goes_on_the_job_object_as_kueues_label_and_needs_a_queue() -> None:
    job = render(make_spec(cluster={"queue": "team-a", "priority_class": "urgent"}), "cifar10-1").main
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "urgent"
    with pytest.raises(SpecError) as err:
        render(make_spec(cluster={"priority_class": "urgent"}), "cifar10-1")
    assert err.value.field == "cluster.priority_class" and "--queue" in err.value.hint


def test_the_preflight_says_what_the_queue_draws_on(kube_backend):
    install(kube_backend)
    with_kueue(kube_backend)
    found, view = queue_findings(kube_backend.client, make_spec(cluster={"queue": "team-a"}))
    assert found == [] and view is not None
    assert view.line() == "queue team-a: ClusterQueue shared-cq, flavours default (Kueue v1beta2)"
    shown = kube_backend.plan(make_spec(cluster={"queue": "team-a"})).text()  # train --dry-run
    assert "# preflight: the cluster can run it\n# queue team-a: ClusterQueue shared-cq, flavours default" in shown


def test_a_kind_kueue_does_not_manage_is_refused_before_it_would_run_past_the_quota(kube_api, kube_backend):
    """Issue 51: Kueue v0.19's own configuration leaves kubeflow.org/pytorchjob out. The preflight
    reads the configuration and refuses to send a PyTorchJob through the queue (it would run at once,
    past the quota) while a TrainJob goes; a PyTorchJob with the queue's label made anyway is said to
    run outside the queue, never admitted; where the configuration cannot be read the plan says so."""
    install(kube_backend)
    with_kueue(kube_backend, frameworks=UPSTREAM_DEFAULT)
    queued = make_spec(cluster={"queue": "team-a"})
    found, _ = queue_findings(kube_backend.client, queued)
    assert [f.problem for f in found] == [
        "Kueue here does not manage kubeflow.org/pytorchjob (its integrations.frameworks: "
        + ", ".join(UPSTREAM_DEFAULT) + "): a job sent to team-a would run at once, past the quota"
    ]  # fmt: skip
    assert "kueue-system/kueue-manager-config" in found[0].fix
    assert queue_findings(kube_backend.client, make_spec(cluster={"queue": "team-a", "kind": "trainjob"}))[0] == []
    refused = kube_backend.plan(queued)
    assert refused.findings and "does not manage kubeflow.org/pytorchjob" in refused.findings[0]

    run_id = kube_backend.submit(make_spec())  # made without the queue, then given its label (as kubectl would)
    kube_backend.client.request(
        "PATCH", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}",
        body={"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}}},
    )  # fmt: skip
    set_conditions(kube_backend, run_id, "Created", "Running")
    status = kube_backend.status(run_id)
    assert status.state is JobState.RUNNING and status.queue is not None and status.queue.outside
    assert status.queue.admitted_at is None
    assert status.reason == (
        "not queued: Kueue here does not manage kubeflow.org/pytorchjob; it runs outside team-a's quota"
    )

    kube_backend.client.request("DELETE", "api/v1/namespaces/kueue-system/configmaps/kueue-manager-config")
    noted = kube_backend.plan(queued)
    assert noted.findings == []
    assert any("could not read Kueue's configuration (kueue-system/kueue-manager-config)" in n for n in noted.notes)


def test_import_keeps_the_queue_and_an_elasticjob_cannot_be_queued() -> None:
    manifest = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: bert
  labels: {kueue.x-k8s.io/queue-name: team-a}
spec:
  runPolicy: {suspend: true}
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: repo/train:1
              command: [torchrun, --nproc-per-node, "2", train.py]
"""
    imported = import_manifest(manifest, "job.yaml")
    assert imported.spec.cluster.queue == "team-a"
    with pytest.raises(SpecError, match="Kueue does not queue an ElasticJob"):
        render(make_spec(cluster={"kind": "elasticjob", "queue": "team-a"}), "e-1", "elasticjob")


def workload(job: dict, conditions: list[dict], admission: dict | None = None) -> dict:
    """The Workload Kueue makes of a job (v1beta2), with the status Kueue gives it."""
    meta = job["metadata"]
    status: dict = {"conditions": conditions}
    if admission:
        status["admission"] = admission
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"pytorchjob-{meta['name']}-3f2a1",
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
            "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"],
                                 "uid": meta["uid"], "controller": True}],
        },
        "spec": {"queueName": "team-a", "podSets": []},
        "status": status,
    }  # fmt: skip


QUOTA = (
    "couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in flavor "
    "a100, 4 more needed"
)


def test_a_queued_job_says_where_it_waits_and_why_until_admitted_and_again_when_preempted(kube_api, kube_backend):
    """Kueue's Workload for the job, as Kueue would write it: pending on quota (with its place from the
    visibility API), then admitted (the job unsuspended), then preempted (suspended again)."""
    install(kube_backend)
    with_kueue(kube_backend)
    run_id = kube_backend.submit(make_spec(cluster={"queue": "team-a"}))
    path = api_path(api_of("PyTorchJob"), NS, run_id)
    uid = kube_backend.client.request("GET", path)["metadata"].get("uid") or "7d4c0c52-1f7e-4b7c-9b0e-3c1d2e4f5a6b"
    kube_backend.client.request("PATCH", path, body={"metadata": {"uid": uid}})  # the API server gives one
    job = kube_backend.client.request("GET", path)
    # no Workload yet: queued, waiting for Kueue
    status = kube_backend.status(run_id)
    assert status.state is JobState.QUEUED and "waiting for Kueue to take it in" in status.reason
    # pending on quota, third in its queue
    pending = workload(job, [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": QUOTA,
                              "lastTransitionTime": "2026-11-25T01:00:00Z"}])  # fmt: skip
    kube_backend.client.request("POST", f"{KUEUE}/namespaces/{NS}/workloads", body=pending)
    kube_api.emulator.visibility[(NS, "team-a")] = [
        {"metadata": {"name": pending["metadata"]["name"]}, "positionInLocalQueue": 2, "positionInClusterQueue": 5}
    ]
    status = kube_backend.status(run_id)
    assert status.state is JobState.QUEUED
    assert status.reason == f"queued in team-a (ClusterQueue shared-cq), position 3: {QUOTA}"
    for odd in ("3rd", [1], 2.5, True, -1, 10**40):  # issue 40 row 12: a position of the wrong type is unknown
        kube_api.emulator.visibility[(NS, "team-a")] = [
            {"metadata": {"name": pending["metadata"]["name"]}, "positionInLocalQueue": odd}
        ]
        status = kube_backend.status(run_id)
        assert status.reason == f"queued in team-a (ClusterQueue shared-cq): {QUOTA}", odd
    kube_api.emulator.visibility[(NS, "team-a")] = [
        {"metadata": {"name": pending["metadata"]["name"]}, "positionInLocalQueue": 2, "positionInClusterQueue": 5}
    ]
    shown = [s for s in kube_backend.list() if s.run_id == run_id][0]
    assert shown.state is JobState.QUEUED and shown.to_dict()["queue"]["cluster_position"] == 5  # jobs --output json
    # admitted: Kueue unsuspends the job; the operator's states follow
    admitted = workload(
        job,
        [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "",
          "lastTransitionTime": "2026-11-25T01:10:00Z"},
         {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
          "lastTransitionTime": "2026-11-25T01:10:00Z"}],
        {"clusterQueue": "shared-cq", "podSetAssignments": []},
    )  # fmt: skip
    name = pending["metadata"]["name"]
    kube_backend.client.request("PATCH", f"{KUEUE}/namespaces/{NS}/workloads/{name}", body=admitted)
    kube_backend.client.request("PATCH", path, body={"spec": {"runPolicy": {"suspend": False}}})
    status = kube_backend.status(run_id)
    assert status.state is JobState.PENDING and status.queue is not None
    assert status.queue.admitted_at == pytest.approx(1795569000.0)  # 2026-11-25T01:10:00Z
    # preempted: Kueue evicts it and suspends it again; it waits to be admitted again
    preempted = workload(
        job,
        [{"type": "Evicted", "status": "True", "reason": "Preempted",
          "message": "Preempted to accommodate a workload (UID: 1a2b) in the ClusterQueue",
          "lastTransitionTime": "2026-11-25T01:20:00Z"},
         {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": QUOTA,
          "lastTransitionTime": "2026-11-25T01:20:00Z"}],
    )  # fmt: skip
    kube_backend.client.request("PATCH", f"{KUEUE}/namespaces/{NS}/workloads/{name}", body=preempted)
    kube_backend.client.request("PATCH", path, body={"spec": {"runPolicy": {"suspend": True}}})
    status = kube_backend.status(run_id)
    assert status.state is JobState.QUEUED and status.queue is not None and status.queue.preempted is True
    assert "preempted by Kueue: Preempted to accommodate a workload" in status.reason and QUOTA in status.reason
    # it ends (still suspended, as Kueue left it): its row says how it ended and the queue it went
    # through (jobs --queue finds it), and that nothing waits
    set_conditions(kube_backend, run_id, "Created", "Running", "Succeeded")
    (row,) = [s for s in kube_backend.list() if s.run_id == run_id]
    assert row.state is JobState.SUCCEEDED and place_cells(row)[1] == "team-a"
    assert RowFilter(queue="team-a").keeps(row) and row.queue is not None and not row.queue.reason


def test_the_monitor_shows_a_queued_job_where_it_waits_and_why_then_admitted_then_preempted(
    kube_api, kube_backend, tmp_path
):
    import asyncio

    from textual.widgets import Static
    from tui_support import wait_for

    from torchdeck.backends.kubernetes.backend import KubernetesBackend
    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.monitor import MonitorScreen

    install(kube_backend)
    with_kueue(kube_backend)
    run_id = kube_backend.submit(make_spec(cluster={"queue": "team-a"}))
    path = api_path(api_of("PyTorchJob"), NS, run_id)
    uid = kube_backend.client.request("GET", path)["metadata"].get("uid") or "5e1f0c52-1f7e-4b7c-9b0e-3c1d2e4f5a6b"
    kube_backend.client.request("PATCH", path, body={"metadata": {"uid": uid}})
    job = kube_backend.client.request("GET", path)
    pending = workload(job, [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": QUOTA}])
    kube_backend.client.request("POST", f"{KUEUE}/namespaces/{NS}/workloads", body=pending)
    settings = Settings(backend="kubernetes", state_dir=tmp_path / "state", refresh_hz=10)

    async def scenario():
        app = make_app(settings, KubernetesBackend(kube_api.kubeconfig), run_id)
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
            status_line = app.screen.query_one("#status-line", Static)
            progress = app.screen.query_one("#progress-line", Static)
            await wait_for(pilot, lambda: "QUEUED" in str(status_line.render()), what="the queued state")
            await wait_for(
                pilot,
                lambda: "queued in team-a (ClusterQueue shared-cq): couldn't assign flavors" in str(progress.render()),
                what="where it waits and why",
            )
            # admitted: Kueue unsuspends it, and the monitor follows the operator's state
            name = pending["metadata"]["name"]
            admitted = [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""}]
            kube_backend.client.request(
                "PATCH", f"{KUEUE}/namespaces/{NS}/workloads/{name}",
                body={"status": {"conditions": admitted, "admission": {"clusterQueue": "shared-cq"}}},
            )  # fmt: skip
            kube_backend.client.request("PATCH", path, body={"spec": {"runPolicy": {"suspend": False}}})
            await wait_for(pilot, lambda: "PENDING" in str(status_line.render()), what="the admitted job's state")
            assert "queued in" not in str(progress.render())
            # preempted: suspended again, and it says so
            preempted = [
                {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted to make room"},
                {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": QUOTA},
            ]
            kube_backend.client.request(
                "PATCH", f"{KUEUE}/namespaces/{NS}/workloads/{name}", body={"status": {"conditions": preempted}}
            )
            kube_backend.client.request("PATCH", path, body={"spec": {"runPolicy": {"suspend": True}}})
            await wait_for(pilot, lambda: "QUEUED" in str(status_line.render()), what="queued again")
            await wait_for(
                pilot,
                lambda: "preempted by Kueue: Preempted to make room" in str(progress.render()),
                what="the preemption said",
            )

    asyncio.run(scenario())


def test_queues_say_usage_who_waits_in_what_order_and_whats_ahead_of_your_run(kube_api, tmp_path):
    cli = cluster_cli(kube_api, tmp_path)
    backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(backend)
    with_kueue(backend)
    run_id = backend.submit(make_spec(cluster={"queue": "team-a"}))
    ours = backend.client.request("GET", api_path(api_of("PyTorchJob"), NS, run_id))
    waits = [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": QUOTA}]
    mine = workload(ours, waits)
    mine["spec"]["priority"] = 10
    mine["metadata"]["creationTimestamp"] = "2026-11-25T12:00:00Z"  # as the API server stamps it
    backend.client.request("POST", f"{KUEUE}/namespaces/{NS}/workloads", body=mine)
    for name, priority in (("early", 10), ("urgent", 100), ("late", 0)):
        theirs = their_job(backend, name, NS, queue="team-a")
        w = workload(theirs, waits)
        w["metadata"]["name"] = f"pytorchjob-{name}-1"
        w["metadata"]["creationTimestamp"] = "2026-11-25T00:00:00Z" if name == "early" else "2026-11-26T00:00:00Z"
        w["spec"]["priority"] = priority
        backend.client.request("POST", f"{KUEUE}/namespaces/{NS}/workloads", body=w)
    backend.client.request(
        "PATCH", f"{KUEUE}/clusterqueues/shared-cq/status",
        body={"status": {"pendingWorkloads": 4, "admittedWorkloads": 0,
                         "flavorsUsage": [{"name": "default", "resources": [{"name": "cpu", "total": "48"},
                                                                            {"name": "memory", "total": "8Gi"}]}]}},
    )  # fmt: skip

    shown = cli("queues")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "ClusterQueue shared-cq: 0 admitted, 4 waiting" in out and f"local queues: {NS}/team-a" in out
    assert "default cpu: 48 of 64 in use" in out and "default memory: 8 GiB of 64 B in use" in out
    order = [line.split()[1] for line in out.splitlines() if line.strip()[:2] in ("1.", "2.", "3.", "4.")]
    # Kueue's StrictFIFO: priority first, then the older; the run is younger than "early" at the same priority
    assert order == [f"pytorchjob/{NS}/urgent", f"pytorchjob/{NS}/early", run_id, f"pytorchjob/{NS}/late"]
    assert f"{run_id} (yours)" in out and QUOTA in out
    assert f"your run {run_id}: place 3 in shared-cq, 2 ahead of it" in out
    assert "order: priority, then creation time" in out and "not Kueue's word" in out
    # where Kueue's visibility API answers, its order is the one shown
    kube_api.emulator.visibility[("", "shared-cq")] = [
        {"metadata": {"name": n, "namespace": NS}} for n in (mine["metadata"]["name"], "pytorchjob-late-1")
    ]
    out = cli("queues").stdout
    assert f"your run {run_id}: place 1 in shared-cq, 0 ahead of it" in out and "order: Kueue's visibility API" in out
    # an older Kueue (0.6 to 0.8) serves its visibility API at v1alpha1 alone: its group's discovery says so
    kube_api.emulator.visibility_versions = ["v1alpha1"]
    out = cli("queues").stdout
    assert f"your run {run_id}: place 1 in shared-cq, 0 ahead of it" in out and "order: Kueue's visibility API" in out
    kube_api.emulator.visibility_versions = []  # none served (Kueue without its extension API server): the fallback
    out = cli("queues").stdout
    assert f"your run {run_id}: place 3 in shared-cq, 2 ahead of it" in out and "not Kueue's word" in out
