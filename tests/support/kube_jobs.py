"""The kubernetes backend's test cluster, set up as a prepared cluster is: a kmock API server
(``kube_cluster.py``), a backend connected to it through a kubeconfig, the operators' CRDs, the
claim and the service account; and what the tests play as the operator and the kubelet (pods,
their phases, the job's conditions, metric lines in the logs). Shared by the kube, cloud and
console tests; the fixtures are ``kube_api`` (the API server) and ``kube_backend``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
from kube_cluster import running_cluster

from torchdeck.backends.kubernetes import crds
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.kubernetes.client import ApiError, api_path
from torchdeck.backends.kubernetes.jobs import api_of
from torchdeck.backends.kubernetes.kinds import JOB_KINDS
from torchdeck.backends.kubernetes.manifests import RUN_LABEL
from torchdeck.backends.spec import KINDS, spec_from_dict

NS = "training"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/torchdeck-trainer:v3"


@pytest.fixture
def kube_api(tmp_path):
    yield from running_cluster(tmp_path, NS)


@pytest.fixture
def kube_backend(kube_api):
    return KubernetesBackend(kube_api.kubeconfig)


def make_spec(**changes):
    data: dict[str, Any] = {
        "name": "cifar10",
        "nodes": 2,
        "nproc_per_node": 2,
        "image": IMAGE,
        "namespace": NS,
        "cluster": {"pvc": "shared", "service_account": "torchdeck-s3"},
    }
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return spec_from_dict(data)


def install_crd(kube_backend, crd_file):
    """An operator's own CRD, as its release publishes it (manifests/crds/)."""
    kube_backend.client.request(
        "POST", "apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crds.crd(crd_file)
    )


def install(kube_backend, kinds=KINDS, pvc_phase="Bound", sa=True, gpu_nodes=0, cpu_nodes=1):
    """What a prepared cluster has: the operators' CRDs (their newest supported releases), the
    claim, the service account, nodes."""
    for kind in kinds:
        if not JOB_KINDS[kind].builtin:
            install_crd(kube_backend, JOB_KINDS[kind].targets[-1].crd_file)
    kube_backend.client.request(
        "POST",
        f"api/v1/namespaces/{NS}/persistentvolumeclaims",
        body={
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "shared"},
            "status": {"phase": pvc_phase},
        },
    )
    if sa:
        kube_backend.client.request(
            "POST",
            f"api/v1/namespaces/{NS}/serviceaccounts",
            body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "torchdeck-s3"}},
        )
    cpu = {"cpu": "8", "memory": "32Gi"}
    gpu = {"cpu": "8", "memory": "60Gi", "nvidia.com/gpu": "1"}
    for pool, count, allocatable in (("cpu", cpu_nodes, cpu), ("gpu", gpu_nodes, gpu)):
        for i in range(count):
            node = {"name": f"{pool}-{i}", "labels": {"pool": pool}}
            body = {"apiVersion": "v1", "kind": "Node", "metadata": node, "status": {"allocatable": allocatable}}
            kube_backend.client.request("POST", "api/v1/nodes", body=body)


def job_owner(kube_backend, job_name, namespace=NS):
    """The owner reference an operator gives the pods it makes for the job ``job_name`` (of whichever
    kind holds that name in ``namespace``), with the uid the API server gave the job; None where
    no job has that name."""
    for info in JOB_KINDS.values():
        try:
            job = kube_backend.client.request("GET", api_path(info.api, namespace, job_name))
        except ApiError:
            continue
        meta = job["metadata"]
        api_version = f"{info.group}/{info.version}"
        return {
            "apiVersion": api_version,
            "kind": info.kind,
            "name": meta["name"],
            "uid": meta.get("uid"),
            "controller": True,
            "blockOwnerDeletion": True,
        }
    return None


JOBSET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "jobsets.jobset.x-k8s.io"},
    "spec": {
        "group": "jobset.x-k8s.io",
        "scope": "Namespaced",
        "names": {"kind": "JobSet", "plural": "jobsets", "singular": "jobset"},
        "versions": [{"name": "v1alpha2", "served": True, "storage": True}],
    },
}


def trainjob_owner(kube_backend, run_id, namespace=NS):
    """What Kubeflow Trainer makes between a TrainJob and its pods, as JobSet does it: a JobSet the
    TrainJob owns, and a Job (replicated job "node") the JobSet owns; the owner reference of the
    pods, which the Job gives them."""
    if not kube_backend.client.exists("apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"):
        kube_backend.client.request("POST", "apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=JOBSET_CRD)
    chain = job_owner(kube_backend, run_id, namespace)
    for api, kind, name in (
        (f"apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets", "JobSet", run_id),
        (f"apis/batch/v1/namespaces/{namespace}/jobs", "Job", f"{run_id}-node-0"),
    ):
        made = kube_backend.client.request(
            "POST",
            api,
            body={
                "apiVersion": api.split("/namespaces/")[0].removeprefix("apis/"),
                "kind": kind,
                "metadata": {"name": name, "ownerReferences": [chain]},
            },
        )
        chain = {
            "apiVersion": made["apiVersion"],
            "kind": kind,
            "name": name,
            "uid": made["metadata"]["uid"],
            "controller": True,
        }
    return chain


def make_pod(
    kube_backend,
    run_id,
    name,
    replica_type="worker",
    index=0,
    phase="Running",
    restarts=0,
    node="cpu-0",
    own=None,
    owner="job",
):
    """A pod as the training operator creates it and the kubelet reports it (``own``: the label its
    operator gives it, for a job torchdeck did not make, in place of the run label). Its owner is
    the job named ``run_id``, as the operator sets it (``owner``: another reference, or None: a pod
    nobody's job made, e.g. one planted with the run's labels)."""
    state = (
        {"running": {"startedAt": "2026-11-22T06:00:00Z"}}
        if phase == "Running"
        else (
            {"terminated": {"exitCode": 0, "reason": "Completed"}}
            if phase == "Succeeded"
            else {"waiting": {"reason": "ContainerCreating"}}
        )
    )
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            # as an API server sets it (kmock keeps what it is sent, and sets none)
            "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "labels": {
                (own or RUN_LABEL): run_id,
                "training.kubeflow.org/replica-type": replica_type,
                "training.kubeflow.org/replica-index": str(index),
            },
        },
        "spec": {"nodeName": node, "containers": [{"name": "pytorch", "image": IMAGE}]},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": "pytorch", "image": IMAGE, "ready": True, "restartCount": restarts, "state": state}
            ],
        },
    }
    reference = job_owner(kube_backend, run_id) if owner == "job" else owner
    if reference is not None:
        body["metadata"]["ownerReferences"] = [reference]
    kube_backend.client.request("POST", f"api/v1/namespaces/{NS}/pods", body=body)
    return body


def run_two_pods(kube_api, kube_backend, run_id, master_lines, worker_lines, worker_ended=True):
    """A PyTorchJob's master and worker pods, running, with their logs scripted."""
    em = kube_api.emulator
    kube_api.call(em.script_log, NS, f"{run_id}-master-0", master_lines)
    kube_api.call(em.script_log, NS, f"{run_id}-worker-0", worker_lines, ended=worker_ended)
    make_pod(kube_backend, run_id, f"{run_id}-master-0", "master", phase="Running")
    make_pod(kube_backend, run_id, f"{run_id}-worker-0", "worker", 0, phase="Running")


def set_phase(kube_backend, pod, phase, restarts=0):
    state = (
        {"running": {"startedAt": "2026-11-22T06:00:00Z"}}
        if phase == "Running"
        else {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1}}
    )
    kube_backend.client.request(
        "PATCH",
        f"api/v1/namespaces/{NS}/pods/{pod}/status",
        body={
            "status": {
                "phase": phase,
                "containerStatuses": [{"name": "pytorch", "image": IMAGE, "restartCount": restarts, "state": state}],
            }
        },
    )


def set_conditions(kube_backend, run_id, *types, message=""):
    path = f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}/status"
    kube_backend.client.request(
        "PATCH",
        path,
        body={
            "status": {
                "conditions": [
                    {"type": t, "status": "True", "reason": f"PyTorchJob{t}", "message": message} for t in types
                ]
            }
        },
    )


def metric_line(rank, step, loss=2.0, **extra):
    return json.dumps(
        {
            "schema": 1,
            "event": "step",
            "rank": rank,
            "world_size": 4,
            "time": 1_790_000_000.0 + step,
            "epoch": 1,
            "step": step,
            "loss": loss,
            "samples_per_s": 900.0,
            **extra,
        }
    )


def cluster_cli(kube_api, tmp_path):
    """``torchdeck --backend kubernetes ARGS`` against the kmock cluster, with a state folder of its own."""
    env = {
        "KUBECONFIG": str(kube_api.kubeconfig),
        "TORCHDECK_STATE_DIR": str(tmp_path / "state"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }

    def torchdeck(*args):
        return subprocess.run(
            [sys.executable, "-m", "torchdeck", "--backend", "kubernetes", *args],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,  # no terminal: a question is answered no
            timeout=120,
        )

    return torchdeck


THEIRS = "team-b"
"""Someone else's namespace."""


def their_job(backend, name="bert", namespace=THEIRS, queue=None, manager="kubectl-client-side-apply"):
    """A PyTorchJob someone made with kubectl in their own namespace (the API server keeps who)."""
    meta: dict = {"name": name, "namespace": namespace, "managedFields": [{"manager": manager, "operation": "Update"}]}
    if queue:
        meta["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    container = {"name": "pytorch", "image": "their/bert:1", "command": ["torchrun", "train.py"]}
    replicas = {role: {"replicas": n, "template": {"spec": {"containers": [container]}}} for role, n in
                (("Master", 1), ("Worker", 3))}  # fmt: skip
    body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
            "spec": {"pytorchReplicaSpecs": replicas, "runPolicy": {"suspend": bool(queue)}}}  # fmt: skip
    return backend.client.request("POST", api_path(api_of("PyTorchJob"), namespace), body=body)
