"""What a cluster run costs, on kmock with nodes labelled as EKS labels them (instance type, purchase
option, zone): an on-demand node priced from torchdeck's table, a spot node at EC2's spot price
(moto's server answers describe_spot_price_history), a node of a type torchdeck cannot price
(unknown until a price is set), the cost kept on the job once it ends, and the budget's stop, which
suspends the job and says why."""

from __future__ import annotations

import json
import sys

from kube_jobs import IMAGE, NS, install, job_owner, make_spec
from local_runs import cli_env, run_cli

from torchdeck.backends.base import JobState
from torchdeck.backends.cost import shipped_prices
from torchdeck.backends.eks.prices import SpotPrices
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.kubernetes.costs import COST_ANNOTATION, STOPPED_ANNOTATION
from torchdeck.backends.kubernetes.manifests import RUN_LABEL
from torchdeck.backends.local import LocalBackend

BOUND = "2026-11-22T06:00:00Z"
ENDED = "2026-11-22T08:00:00Z"  # two hours on the node


def add_node(backend, name, instance_type, capacity="ON_DEMAND", gpus="1", zone="us-east-1a"):
    labels = {
        "node.kubernetes.io/instance-type": instance_type,
        "eks.amazonaws.com/capacityType": capacity,
        "topology.kubernetes.io/zone": zone,
    }
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": gpus}},
    }
    backend.client.request("POST", "api/v1/nodes", body=body)


def bound_pod(backend, run_id, name, node, gpus="1", phase="Running"):
    """A pod the scheduler bound to ``node`` at BOUND (and, Succeeded, that ended at ENDED)."""
    state = {"terminated": {"exitCode": 0, "finishedAt": ENDED}} if phase == "Succeeded" else {"running": {}}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {RUN_LABEL: run_id, "training.kubeflow.org/replica-index": "0"},
            "ownerReferences": [job_owner(backend, run_id)],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "pytorch", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
        },
        "status": {
            "phase": phase,
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": BOUND}],
            "containerStatuses": [{"name": "pytorch", "image": IMAGE, "restartCount": 0, "state": state}],
        },
    }
    backend.client.request("POST", f"api/v1/namespaces/{NS}/pods", body=body)


def test_a_run_is_priced_by_its_nodes_types_and_purchase_options(kube_api, aws_env):
    backend = KubernetesBackend(kube_api.kubeconfig, spot_price=SpotPrices("us-east-1"))
    install(backend, cpu_nodes=0)
    add_node(backend, "od-0", "g5.xlarge")
    add_node(backend, "spot-0", "g5.xlarge", capacity="SPOT")
    run_id = backend.submit(make_spec(resources={"gpus": 1}))
    bound_pod(backend, run_id, f"{run_id}-master-0", "od-0")
    bound_pod(backend, run_id, f"{run_id}-worker-0", "spot-0")

    status = backend.status(run_id)
    cost = status.cost
    by_option = {line.what: line for line in cost.lines}
    on_demand, spot = by_option["1 x g5.xlarge (on-demand)"], by_option["1 x g5.xlarge (spot)"]
    assert on_demand.per_hour == shipped_prices()["g5.xlarge"] and on_demand.source == "on-demand price table"
    # moto's spot price history: its figure, for the node's type and zone
    assert spot.per_hour == 0.00001 and "EC2 spot price in us-east-1a" == spot.source
    assert cost.running and cost.amount is not None and on_demand.node_hours > 0
    assert status.to_dict()["cost"]["amount"] == cost.amount

    # the listing prices every run from one pod listing and one node listing
    listed = next(s for s in backend.list() if s.run_id == run_id)
    assert listed.cost is not None and {x.what for x in listed.cost.lines} == set(by_option)


def test_a_node_torchdeck_cannot_price_is_unknown_until_a_price_is_set(kube_api):
    backend = KubernetesBackend(kube_api.kubeconfig)
    install(backend, cpu_nodes=0)
    add_node(backend, "n-0", "x9.weird", gpus="4")
    run_id = backend.submit(make_spec(nodes=1, resources={"gpus": 1}))
    bound_pod(backend, run_id, f"{run_id}-master-0", "n-0", phase="Succeeded")
    status = backend.status(run_id)
    assert status.cost.amount is None and status.cost.cell() == "?"
    assert "x9.weird is not in torchdeck's price table" in status.cost.words()

    priced = KubernetesBackend(kube_api.kubeconfig, node_price_per_hour=2.0).status(run_id)
    (line,) = priced.cost.lines
    # one GPU of the node's four, for the two hours the pod was bound there
    assert line.node_hours == 0.5 and line.per_hour == 2.0 and priced.cost.amount == 1.0
    assert line.source == "the node_price_per_hour setting"


def test_an_ended_run_keeps_its_cost_on_its_job_after_its_pods_go(kube_api):
    backend = KubernetesBackend(kube_api.kubeconfig)
    install(backend, cpu_nodes=0)
    add_node(backend, "od-0", "g4dn.xlarge")
    run_id = backend.submit(make_spec(nodes=1, resources={"gpus": 1}))
    pod = f"{run_id}-master-0"
    bound_pod(backend, run_id, pod, "od-0", phase="Succeeded")
    backend.client.request(
        "PATCH",
        f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}/status",
        body={"status": {"conditions": [{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}]}},
    )
    first = backend.status(run_id)
    assert first.state is JobState.SUCCEEDED and first.cost.amount == 2 * shipped_prices()["g4dn.xlarge"]
    job = backend.client.request("GET", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}")
    assert json.loads(job["metadata"]["annotations"][COST_ANNOTATION])["amount"] == first.cost.amount

    backend.client.request("DELETE", f"api/v1/namespaces/{NS}/pods/{pod}")
    again = KubernetesBackend(kube_api.kubeconfig).status(run_id)
    assert again.cost.amount == first.cost.amount and not again.cost.running


def test_the_budget_suspends_the_job_and_says_why(kube_api):
    backend = KubernetesBackend(kube_api.kubeconfig)
    install(backend, cpu_nodes=0)
    add_node(backend, "od-0", "p4d.24xlarge", gpus="8")
    run_id = backend.submit(make_spec(nodes=1, budget=5, resources={"gpus": 8}))
    bound_pod(backend, run_id, f"{run_id}-master-0", "od-0", gpus="8")  # bound since BOUND: far past $5

    status = backend.status(run_id)
    assert status.state is JobState.CANCELLED
    assert status.reason.startswith("stopped at its budget: $") and "of $5.00 spent" in status.reason
    job = backend.client.request("GET", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}")
    assert job["spec"]["runPolicy"]["suspend"] is True  # its pods go (SIGTERM: the trainer's snapshot); the job stays
    assert json.loads(job["metadata"]["annotations"][STOPPED_ANNOTATION])["budget"] == 5

    later = KubernetesBackend(kube_api.kubeconfig).status(run_id)  # another console reads why it stopped
    assert later.state is JobState.CANCELLED and later.reason == status.reason
    assert later.cost.budget == 5 and later.cost.share >= 1

    # issue 51: a console with no record of making the run (another machine's) says it is past its
    # budget and stops nothing: torchdeck stops at a budget only what it recorded making
    backend.client.request("PATCH", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}",
                           body={"spec": {"runPolicy": {"suspend": False}}, "metadata": {"annotations": {
                               STOPPED_ANNOTATION: None}}})  # fmt: skip
    elsewhere = KubernetesBackend(kube_api.kubeconfig).status(run_id)
    assert elsewhere.found_by_label and elsewhere.state is not JobState.CANCELLED
    assert any("past its budget" in w for w in elsewhere.warnings)
    job = backend.client.request("GET", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}")
    assert job["spec"]["runPolicy"]["suspend"] is False and STOPPED_ANNOTATION not in job["metadata"]["annotations"]

    # issue 40 row 12: the annotation is the job's, which anyone with edit rights writes; figures of
    # the wrong type are unknown, never a traceback out of status
    path = f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}"
    for odd in ('{"budget": "abc", "spent": [1]}', '{"budget": 1e400}', "[1]", "not json"):
        backend.client.request("PATCH", path, body={"metadata": {"annotations": {STOPPED_ANNOTATION: odd}}})
        shown = backend.status(run_id)
        assert shown.state is JobState.CANCELLED and "\n" not in shown.reason, odd


def test_compare_puts_a_cluster_run_beside_a_laptop_run(kube_api, tmp_path):
    """Runs of any backend side by side: ``compare ID kubernetes:ID`` reads the first from the default
    (local) backend and the second from kmock's cluster, each with its own cost; a backend that is
    not one, and one run named twice, are one line each."""
    backend = KubernetesBackend(kube_api.kubeconfig)
    install(backend, cpu_nodes=0)
    add_node(backend, "od-0", "g4dn.xlarge")
    cluster_run = backend.submit(make_spec(nodes=1, resources={"gpus": 1}))
    bound_pod(backend, cluster_run, f"{cluster_run}-master-0", "od-0", phase="Succeeded")
    backend.client.request(
        "PATCH",
        f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{cluster_run}/status",
        body={"status": {"conditions": [{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}]}},
    )
    code = tmp_path / "project"
    code.mkdir()
    (code / "train.py").write_text("print('step 1/2 loss 1.0', flush=True)\nprint('step 2/2 loss 0.5', flush=True)\n")
    env = {
        **cli_env(tmp_path / "state"),
        "KUBECONFIG": str(kube_api.kubeconfig),
        "TORCHDECK_NAMESPACE": NS,
        "TORCHDECK_LOCAL_PRICE_PER_HOUR": "0.40",
    }
    trained = run_cli(["train", "train.py", "--nproc-per-node", "1", "--python", sys.executable], env, code)
    assert trained.returncode == 0, trained.stderr
    (laptop,) = LocalBackend(tmp_path / "state").list()

    shown = run_cli(["compare", laptop.run_id, f"kubernetes:{cluster_run}", "--output", "json"], env, code)
    assert shown.returncode == 0, shown.stderr
    runs = json.loads(shown.stdout)["runs"]
    assert [(r["backend"], r["run_id"], r["state"]) for r in runs] == [
        ("local", laptop.run_id, "succeeded"),
        ("kubernetes", cluster_run, "succeeded"),
    ]
    assert runs[0]["final_loss"] == 0.5 and runs[0]["cost"]["amount"] > 0
    assert runs[1]["cost"]["amount"] == 2 * shipped_prices()["g4dn.xlarge"]  # two hours on its node
    table = run_cli(["compare", f"local:{laptop.run_id}", f"kubernetes:{cluster_run}"], env, code)
    assert f"{cluster_run} (kubernetes, succeeded)" in table.stdout and f"{laptop.run_id} (local" in table.stdout

    for refs, words in (
        ([laptop.run_id, f"k8s:{cluster_run}"], "no backend 'k8s' in 'k8s:"),
        ([laptop.run_id, f"local:{laptop.run_id}"], "a run is named twice"),
    ):
        bad = run_cli(["compare", *refs], env, code)
        assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert words in bad.stderr and "Traceback" not in bad.stderr
