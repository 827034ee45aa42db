"""The typed views of what torchdeck reads from a cluster (``backends/kubernetes/objects.py``): made
from objects shaped as the API server writes them, and from objects another user on a shared cluster
shaped as anything, which read as empty rather than as a traceback."""

from __future__ import annotations

import pytest

from torchdeck.backends.kubernetes.objects import (
    ClusterQueue,
    Node,
    ObjectMeta,
    PendingWorkload,
    Pod,
    WatchEvent,
    Workload,
)

POD = {
    "metadata": {
        "name": "r-worker-0",
        "namespace": "training",
        "uid": "u-1",
        "labels": {"training.kubeflow.org/replica-type": "worker", "odd": 3},
        "ownerReferences": [
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "r", "uid": "j-1", "controller": True},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "c-1"},
        ],
        "creationTimestamp": "2026-11-22T06:00:00Z",
    },
    "spec": {"nodeName": "gpu-1", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 2, "cpu": "500m"}}}]},
    "status": {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-22T06:00:01Z"}],
        "containerStatuses": [
            {
                "name": "pytorch",
                "restartCount": 2,
                "state": {"running": {}},
                "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
            }
        ],
    },
}


def test_a_pod_reads_its_place_its_owner_and_how_its_containers_fare() -> None:
    pod = Pod.from_api(POD)
    assert (pod.name, pod.meta.namespace, pod.node, pod.phase) == ("r-worker-0", "training", "gpu-1", "Running")
    assert pod.labels == {"training.kubeflow.org/replica-type": "worker"}  # a label that is no string is none
    assert [ref.kind for ref in pod.meta.controllers()] == ["PyTorchJob"]  # the ConfigMap is no controller
    assert pod.has_started and pod.restarts == 2 and not pod.ended
    last = pod.containers[0].last_terminated
    assert last is not None and (last.reason, last.exit_code) == ("OOMKilled", 137)
    assert pod.resources[0].asked("nvidia.com/gpu") == "2" and pod.resources[0].asked("cpu") == "500m"
    assert pod.conditions[0].is_true and pod.conditions[0].since == pod.meta.created + 1
    assert Pod.from_api(POD) == pod  # the same answer reads as the same view


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"metadata": "x", "spec": [], "status": 3},
        {"metadata": {"labels": [1], "ownerReferences": {"a": 1}}, "status": {"containerStatuses": [None, "x"]}},
        {"status": {"conditions": [{"type": 1, "status": None}], "containerStatuses": [{"state": "running"}]}},
    ],
)
def test_whatever_shape_a_pod_has_it_reads_as_empty(obj: dict) -> None:
    pod = Pod.from_api(obj)
    assert pod.name == "" and not pod.has_started and pod.restarts == 0


def test_a_node_reads_its_taints_and_what_pods_may_take_of_it() -> None:
    node = Node.from_api(
        {
            "metadata": {"name": "n"},
            "spec": {"unschedulable": True, "taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "8"}},
        }
    )
    assert node.unschedulable and node.taints[0].key == "karpenter.sh/disrupted"
    assert node.resources == {"cpu": "8"}  # no allocatable: its capacity


def test_a_watch_error_keeps_its_code_and_says_what_it_was() -> None:
    gone = WatchEvent.from_api({"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}})
    assert (gone.code, gone.error) == (410, "too old resource version")
    added = WatchEvent.from_api({"type": "ADDED", "object": POD})
    assert added.pod.name == "r-worker-0"


def test_kueue_objects_read_their_quotas_admission_and_positions() -> None:
    queue = ClusterQueue.from_api(
        {
            "spec": {
                "cohortName": "team",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 4}]}],
                    }
                ],
            }
        }
    )
    quota = queue.groups[0].flavors[0].resources[0]
    assert (queue.cohort, quota.nominal, quota.borrowing_limit) == ("team", "4", None)
    workload = Workload.from_api(
        {"status": {"admission": {"clusterQueue": "cq"}, "conditions": [{"type": "Admitted"}]}}
    )
    assert workload.admitted_to == "cq" and workload.conditions[0].type == "Admitted"
    place = PendingWorkload.from_api({"metadata": {"name": "w"}, "positionInLocalQueue": "3rd"})
    assert (place.name, place.in_local_queue) == ("w", None)


def test_metadata_reads_a_deletion_time_and_no_time_that_is_not_one() -> None:
    meta = ObjectMeta.from_api({"metadata": {"deletionTimestamp": "2026-11-22T06:00:00Z", "creationTimestamp": "x"}})
    assert meta.deleting is not None and meta.created is None
