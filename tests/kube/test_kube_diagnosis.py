"""Diagnosis of cluster jobs from realistic pod statuses, scheduler events,
job conditions and log lines (shaped as the API server and the kubelet
write them)."""

from __future__ import annotations

import pytest

from torchdeck.backends.kubernetes import diagnosis
from torchdeck.backends.kubernetes.diagnosis import job_findings, log_findings
from torchdeck.backends.kubernetes.objects import Condition, Event, Node, Pod

ECR_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/torchdeck-trainer:v3"


def pod(
    name="cifar10-worker-0",
    phase="Running",
    conditions=(),
    waiting=None,
    last_terminated=None,
    terminated=None,
    image=ECR_IMAGE,
    **status,
):
    state = {"running": {"startedAt": "2026-11-22T06:00:00Z"}}
    if waiting:
        state = {"waiting": waiting}
    if terminated:
        state = {"terminated": terminated}
    cs = {
        "name": "pytorch",
        "image": image,
        "ready": False,
        "restartCount": 3 if last_terminated else 0,
        "state": state,
        "lastState": {"terminated": last_terminated} if last_terminated else {},
    }
    return {
        "metadata": {"name": name, "namespace": "training"},
        "status": {"phase": phase, "conditions": list(conditions), "containerStatuses": [cs], **status},
    }


def diagnose_pod(p, events=(), last_logs=()):
    """The diagnosis of a pod and its events written as the API server returns them."""
    return diagnosis.diagnose_pod(Pod.from_api(p), [Event.from_api(e) for e in events], last_logs)


def unschedulable(message):
    return pod(
        phase="Pending",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
    )


@pytest.mark.parametrize(
    "message, words, fix",
    [
        (
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
            "3 No preemption victims found for incoming pod.",
            "no node has a free GPU",
            "GPU nodegroup",
        ),
        ("0/2 nodes are available: 2 Insufficient cpu.", "not enough free CPU", "resources.cpu"),
        (  # as Kubernetes 1.34's scheduler words it (seen on the real cluster, tests/cluster)
            "0/1 nodes are available: 1 Insufficient cpu. no new claims to deallocate, preemption: 0/1 nodes are "
            "available: 1 Preemption is not helpful for scheduling.",
            "not enough free CPU",
            "resources.cpu",
        ),
        (
            "0/2 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint "
            "{node-role.kubernetes.io/control-plane: }.",
            "not enough free memory",
            "resources.memory",
        ),
        ("0/2 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: true}.", "taints", "toleration"),
        ("0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.", "not bound", "describe pvc"),
        (
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
            "node selector",
            "cluster.node_selector",
        ),
        (  # what the real scheduler (1.34) says of a run kept off both workers: the control plane's taint is no news
            "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 node(s) didn't match Pod's node "
            "affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
            "the nodes it avoids",
            "cluster.avoid_nodes",
        ),
    ],
)
def test_pending_pods_say_why(message, words, fix):
    (finding,) = diagnose_pod(unschedulable(message))
    assert words in finding.problem and fix in finding.fix and finding.where == "cifar10-worker-0"
    assert "\n" not in str(finding)


def test_pending_reason_from_the_scheduler_event_when_the_condition_has_none():
    p = pod(phase="Pending")
    events = [
        {
            "reason": "FailedScheduling",
            "type": "Warning",
            "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        }
    ]
    (finding,) = diagnose_pod(p, events)
    assert "free GPU" in finding.problem


def test_container_creating_stuck_on_a_volume():
    p = pod(phase="Pending", waiting={"reason": "ContainerCreating"})
    events = [
        {
            "reason": "FailedMount",
            "type": "Warning",
            "message": 'MountVolume.SetUp failed for volume "pvc-1" : rpc error: code = DeadlineExceeded '
            "desc = context deadline exceeded",
        }
    ]
    (finding,) = diagnose_pod(p, events)
    assert "ContainerCreating" in finding.problem and "EFS/FSx" in finding.fix


@pytest.mark.parametrize(
    "image, message, fix",
    [
        (
            ECR_IMAGE,
            'failed to pull and unpack image "...": failed to resolve reference: pulling from host '
            "123456789012.dkr.ecr.us-west-2.amazonaws.com failed with status code [manifests v3]: 403 Forbidden",
            "AmazonEC2ContainerRegistryReadOnly",
        ),
        (
            "docker.io/library/torchdeck:nope",
            "rpc error: code = NotFound desc = failed to pull and unpack image "
            '"docker.io/library/torchdeck:nope": failed to resolve reference: docker.io/library/torchdeck:nope: not found',
            "does not exist",
        ),
        (
            "ghcr.io/acme/private:1",
            "failed to authorize: failed to fetch anonymous token: unexpected status: 401 Unauthorized",
            "imagePullSecret",
        ),
    ],
)
def test_image_pull_failures_name_the_cause(image, message, fix):
    p = pod(phase="Pending", image=image, waiting={"reason": "ImagePullBackOff", "message": message})
    (finding,) = diagnose_pod(p)
    assert f"cannot pull image {image}" in finding.problem and fix in finding.fix


def test_crash_loop_shows_the_last_log_lines():
    p = pod(
        waiting={"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"},
        last_terminated={"exitCode": 1, "reason": "Error"},
    )
    logs = ["step 1", "Traceback (most recent call last):", "FileNotFoundError: /shared/data/cifar-10-batches-py"]
    (finding,) = diagnose_pod(p, last_logs=logs)
    assert "CrashLoopBackOff (exit 1)" in finding.problem and "FileNotFoundError" in finding.problem


def test_oom_killed_says_raise_memory():
    crash = pod(waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 137, "reason": "OOMKilled"})
    done = pod(phase="Failed", terminated={"exitCode": 137, "reason": "OOMKilled"})
    for p in (crash, done):
        (finding,) = diagnose_pod(p)
        assert "OOMKilled (exit 137)" in finding.problem and "resources.memory" in finding.fix


def test_evicted():
    p = pod(
        phase="Failed",
        reason="Evicted",
        message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi.",
    )
    (finding,) = diagnose_pod(p)
    assert finding.problem.startswith("Evicted: The node was low on resource: memory")


def test_a_healthy_pod_has_nothing_to_say():
    assert diagnose_pod(pod()) == []


@pytest.mark.parametrize(
    "line, problem",
    [
        ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "rendezvous timed out"),
        (
            "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=120, OpType=ALLREDUCE, Timeout(ms)=1800000)",
            "NCCL collective timed out",
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms "
            "for recv operation to complete",
            "gloo collective timed out",
        ),
        (
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
            "/dev/shm too small",
        ),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "GPU ran out of memory"),
    ],
)
def test_failures_found_in_logs(line, problem):
    (finding,) = log_findings("cifar10-worker-1", ["step 10 loss 2.1", line, line])
    assert problem in finding.problem


def test_job_conditions_restarting_and_failed_after_backoff():
    conditions = [
        {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
        {"type": "Running", "status": "False", "reason": "PyTorchJobRunning"},
        {
            "type": "Restarting",
            "status": "True",
            "reason": "PyTorchJobRestarting",
            "message": "PyTorchJob cifar10 is restarting because 1 Worker replica(s) failed.",
        },
        {
            "type": "Failed",
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "PyTorchJob cifar10 has failed because it has reached the specified backoff limit",
        },
    ]
    restarting, failed = job_findings("cifar10", [Condition.from_api(c) for c in conditions], backoff_limit=3)
    assert "1 Worker replica(s) failed" in restarting.problem
    assert failed.problem.startswith("failed after 3 restarts: PyTorchJob cifar10 has failed")


def test_an_image_the_node_lacks_under_pull_policy_never_is_said_in_plain_words():
    """The kubelet's ErrImageNeverPull, as the real cluster's kubelet (1.34) words it."""
    image = "torchdeck.local/absent:1"
    p = pod(
        phase="Pending",
        image=image,
        waiting={
            "reason": "ErrImageNeverPull",
            "message": f'Container image "{image}" is not present with pull policy of Never',
        },
    )
    p.setdefault("spec", {})["nodeName"] = "torchdeck-node"
    (finding,) = diagnose_pod(p)
    assert finding.problem == (
        f"the image {image} is not on torchdeck-node, and the pod may not pull it (imagePullPolicy: Never)"
    )
    assert "cluster.image_pull_policy: IfNotPresent" in finding.fix


@pytest.mark.parametrize(
    ("node", "said"),
    [
        ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, ""),
        (
            {  # the AWS Node Termination Handler's taint, two minutes before the instance goes
                "spec": {"taints": [{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
            "a spot interruption notice (the instance is being reclaimed)",
        ),
        (
            {
                "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]},
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "False",
                            "reason": "KubeletNotReady",
                            "message": "PLEG is not healthy",
                        },
                        {"type": "MemoryPressure", "status": "True"},
                    ]
                },
            },
            "NotReady (PLEG is not healthy); short of memory",
        ),
        (
            {"spec": {"unschedulable": True}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            "cordoned",
        ),
        (None, "gone from the cluster (deleted: a spot reclaim, a scale-down or a replacement)"),
    ],
)
def test_a_node_is_called_bad_for_what_the_cluster_says_of_it(node, said):
    from torchdeck.backends.kubernetes.diagnosis import node_trouble

    assert node_trouble(None if node is None else Node.from_api(node)) == said


def test_an_evicted_pod_names_its_node_and_why():
    from torchdeck.backends.kubernetes.diagnosis import pod_disruption

    evicted = {"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}}
    assert pod_disruption(Pod.from_api(evicted)) == "evicted its pod: The node was low on resource: memory."
    running = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert pod_disruption(Pod.from_api(running)) == ""
