"""Why a cluster job is not training, in words a person can act on: read
from its pods' statuses (``objects.Pod``, viewed from what the API server returns), the
scheduler's events, the job's conditions and the last log lines. Each
finding is one line with the fix; the monitor and ``torchdeck status`` show
them. Pure functions: tests feed them realistic statuses."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import BackendError
from ..recovery import RecoveryLog, ranks_words
from .client import KubeClient
from .objects import Condition, ContainerStatus, Event, Node, Pod

RDZV_PATTERNS = (
    (
        re.compile(r"RendezvousTimeoutError|rendezvous.*tim(ed|e) ?out|The node .* has failed to join", re.I),
        "rendezvous timed out: not every node joined",
        "check that all pods are Running (a Pending pod holds the others back) and that they reach each other "
        "on port 29400",
    ),
    (
        re.compile(r"NCCL.*(timeout|Timeout|timed out)|Watchdog caught collective operation timeout", re.I),
        "NCCL collective timed out (a hung or dead rank)",
        "look for the rank that failed first; set NCCL_DEBUG=INFO in env: to see the transport",
    ),
    (
        re.compile(r"gloo.*(timeout|Timed out)|Timed out waiting .* for (recv|send)", re.I),
        "gloo collective timed out (a hung or dead rank)",
        "look for the rank that failed first in its logs",
    ),
    (
        re.compile(
            r"No space left on device.*shm|unable to (write to file|allocate shared memory)|"
            r"DataLoader worker .* (killed|exited unexpectedly)|Bus error",
            re.I,
        ),
        "/dev/shm too small for the data-loader workers",
        "raise resources.shm_size (e.g. 8Gi)",
    ),
    (
        re.compile(r"CUDA out of memory|OutOfMemoryError", re.I),
        "the GPU ran out of memory",
        "lower trainer.batch_size, or use precision bf16",
    ),
)


@dataclass(frozen=True)
class Finding:
    """One thing wrong, for one pod or the whole job."""

    where: str
    """The pod's name, or the job's."""
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.where}: {self.problem} (fix: {self.fix})"


def _containers(pod: Pod) -> list[ContainerStatus]:
    return [*pod.init_containers, *pod.containers]


def _pending(name: str, pod: Pod, events: list[Event]) -> list[Finding]:
    found: list[Finding] = []
    for cond in pod.conditions:
        if cond.type == "PodScheduled" and cond.status == "False":
            found.append(_unschedulable(name, cond.message))
    if not found:
        for event in events:
            if event.reason == "FailedScheduling":
                found.append(_unschedulable(name, event.message))
                break
    for event in events:
        if event.reason == "FailedMount":
            message = event.message
            found.append(
                Finding(
                    name,
                    f"stuck in ContainerCreating: a volume does not mount ({_short(message)})",
                    "check the PVC's storage class and its CSI driver (EFS/FSx), and that the "
                    "file system's security group lets the nodes in",
                )
            )
            break
    return found


def _unschedulable(name: str, message: str) -> Finding:
    """The scheduler's message (0/3 nodes are available: 3 Insufficient nvidia.com/gpu ...) in words.
    Where some nodes do not match the pod's selector or the nodes it avoids, that is said before a
    taint on others (a cluster's control-plane nodes carry one no training pod is meant to tolerate,
    and the scheduler's message says only "had untolerated taint(s)")."""
    lower = message.lower()
    if "insufficient nvidia.com/gpu" in lower:
        return Finding(
            name,
            f"Pending: no node has a free GPU ({_short(message)})",
            "add a GPU nodegroup or scale it up, or ask for fewer GPUs (resources.gpus)",
        )
    if "insufficient cpu" in lower:
        return Finding(
            name, f"Pending: not enough free CPU on any node ({_short(message)})", "lower resources.cpu or add nodes"
        )
    if "insufficient memory" in lower:
        return Finding(
            name,
            f"Pending: not enough free memory on any node ({_short(message)})",
            "lower resources.memory or add nodes with more memory",
        )
    if "didn't match pod's node affinity/selector" in lower or "node affinity" in lower:
        return Finding(
            name,
            f"Pending: no node matches its node selector or is left by the nodes it avoids ({_short(message)})",
            "fix cluster.node_selector or avoid fewer nodes (cluster.avoid_nodes); kubectl get nodes --show-labels",
        )
    if "untolerated taint" in lower or "had taint" in lower:
        return Finding(
            name,
            f"Pending: the nodes carry taints the pod does not tolerate ({_short(message)})",
            "add the toleration, or choose other nodes with cluster.node_selector",
        )
    if "unbound immediate persistentvolumeclaims" in lower or "persistentvolumeclaim" in lower:
        return Finding(
            name,
            f"Pending: its PersistentVolumeClaim is not bound ({_short(message)})",
            "check the claim with `kubectl describe pvc` (storage class, CSI driver, capacity)",
        )
    return Finding(
        name,
        f"Pending: cannot be scheduled ({_short(message) or 'no reason given yet'})",
        "kubectl describe pod " + name,
    )


def _short(message: str, limit: int = 160) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 3] + "..."


def diagnose_pod(pod: Pod, events: Iterable[Event] = (), last_logs: Iterable[str] = ()) -> list[Finding]:
    """What is wrong with one pod (nothing, if it is healthy)."""
    name = pod.name or "?"
    events = list(events)
    logs = list(last_logs)
    found: list[Finding] = []
    if pod.reason == "Evicted":
        return [
            Finding(
                name,
                f"Evicted: {_short(pod.message or 'the node ran short of resources')}",
                "give the pod memory/ephemeral-storage requests that match its use",
            )
        ]
    if pod.phase == "Pending":
        found += _pending(name, pod, events)
    for cs in _containers(pod):
        reason, message, image = cs.waiting_reason, cs.waiting_message, cs.image
        if reason in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
            found.append(_image_pull(name, image, message))
        elif reason == "ErrImageNeverPull":
            node = pod.node or "its node"
            found.append(
                Finding(
                    name,
                    f"the image {image} is not on {node}, and the pod may not pull it (imagePullPolicy: Never)",
                    "load the image onto the node, or set cluster.image_pull_policy: IfNotPresent to pull it",
                )
            )
        elif reason == "CrashLoopBackOff":
            last = cs.last_terminated
            code = last.exit_code if last is not None else None
            if (last is not None and last.reason == "OOMKilled") or code == 137:
                found.append(_oom(name))
            else:
                tail = " | ".join(line.strip() for line in logs[-3:] if line.strip())
                found.append(
                    Finding(
                        name,
                        f"CrashLoopBackOff (exit {'?' if code is None else code})"
                        + (f": {_short(tail)}" if tail else ""),
                        f"read its log: torchdeck logs, or kubectl logs --previous {name}",
                    )
                )
        elif reason == "CreateContainerConfigError":
            found.append(
                Finding(
                    name,
                    f"cannot create the container: {_short(message)}",
                    "a referenced ConfigMap, Secret or service account key is missing",
                )
            )
        if cs.terminated is not None and cs.terminated.reason == "OOMKilled" and reason != "CrashLoopBackOff":
            found.append(_oom(name))
    found += log_findings(name, logs)
    return found


def _image_pull(name: str, image: str, message: str) -> Finding:
    lower = message.lower()
    if ".dkr.ecr." in image and (
        "403" in lower or "unauthorized" in lower or "denied" in lower or "no basic auth" in lower
    ):
        fix = (
            "the node role needs ECR read access (AmazonEC2ContainerRegistryReadOnly), and the image must be "
            "in the cluster's account and region"
        )
    elif "not found" in lower or "manifest unknown" in lower:
        fix = "the tag or digest does not exist: push the image, or fix image: in the spec"
    elif "unauthorized" in lower or "denied" in lower or "authentication required" in lower:
        fix = "the registry wants credentials: add an imagePullSecret to the service account"
    elif "no such host" in lower or "i/o timeout" in lower:
        fix = "the nodes cannot reach the registry: check the registry name and the nodes' network egress"
    else:
        fix = "check that the image exists and the nodes can pull it (kubectl describe pod " + name + ")"
    return Finding(name, f"cannot pull image {image or '?'}" + (f": {_short(message)}" if message else ""), fix)


def _oom(name: str) -> Finding:
    return Finding(
        name,
        "OOMKilled (exit 137): the container went over its memory limit",
        "raise resources.memory, or lower trainer.batch_size",
    )


def log_findings(where: str, lines: Iterable[str]) -> list[Finding]:
    """Rendezvous, NCCL/gloo, /dev/shm and CUDA memory failures found in log lines."""
    found: list[Finding] = []
    seen: set[str] = set()
    for line in lines:
        for pattern, problem, fix in RDZV_PATTERNS:
            if problem not in seen and pattern.search(line):
                seen.add(problem)
                found.append(Finding(where, problem, fix))
    return found


def job_findings(name: str, conditions: Iterable[Condition], backoff_limit: int | None = None) -> list[Finding]:
    """The operator's own word: a job restarting, or failed after its backoff limit."""
    found: list[Finding] = []
    for cond in conditions:
        if not cond.is_true:
            continue
        kind, reason, message = cond.type, cond.reason, cond.message
        if kind == "Restarting":
            found.append(
                Finding(
                    name,
                    f"restarting: {_short(message) or reason}",
                    "a pod failed and is being restarted; its log says why",
                )
            )
        elif kind == "Failed":
            limit = (
                f" after {backoff_limit} restarts"
                if backoff_limit is not None and ("backoff" in (reason + message).lower())
                else ""
            )
            found.append(
                Finding(
                    name,
                    f"failed{limit}: {_short(message) or reason}",
                    "read the failed pod's log; raise cluster.backoff_limit only for flaky nodes",
                )
            )
    return found


def pod_findings(client: KubeClient, namespace: str, pods: Sequence[Pod]) -> list[Finding]:
    """What is wrong with these pods; the scheduler's events are read for Pending ones only."""
    return [
        f
        for pod in pods
        for f in diagnose_pod(pod, pod_events(client, namespace, pod.name) if pod.phase == "Pending" else ())
    ]


def pod_events(client: KubeClient, namespace: str, pod: str) -> list[Event]:
    """The events about one pod (none where they cannot be read)."""
    try:
        return client.read_events(namespace, pod)
    except BackendError:
        return []


SICK_TAINTS = {
    "node.kubernetes.io/unreachable": "unreachable (its kubelet stopped reporting)",
    "node.kubernetes.io/not-ready": "NotReady",
    "node.kubernetes.io/out-of-disk": "out of disk",
    # the AWS Node Termination Handler's taints (its README, TAINT_NODE)
    "aws-node-termination-handler/spot-itn": "a spot interruption notice (the instance is being reclaimed)",
    "aws-node-termination-handler/scheduled-maintenance": "EC2 scheduled maintenance",
    "aws-node-termination-handler/asg-lifecycle-termination": "being terminated by its Auto Scaling group",
    "aws-node-termination-handler/rebalance-recommendation": "an EC2 rebalance recommendation (spot at risk)",
    "karpenter.sh/disrupted": "being disrupted by Karpenter",
    "ToBeDeletedByClusterAutoscaler": "being removed by the cluster autoscaler",
    "cloud.google.com/impending-node-termination": "an impending termination (preemptible VM)",
}
"""Taints that mark a node as going or gone, and what each means."""
PRESSURES = {"MemoryPressure": "memory", "DiskPressure": "disk", "PIDPressure": "process ids"}


def node_trouble(node: Node | None, now: float | None = None) -> str:
    """Why a node is no place to run on ("" where nothing says so); None: the node is gone. NOW (the
    clock) adds since when a node has been NotReady."""
    if node is None:
        return "gone from the cluster (deleted: a spot reclaim, a scale-down or a replacement)"
    said: list[str] = []
    for condition in node.conditions:
        kind, value = condition.type, condition.status
        why = _short(condition.message or condition.reason, 90)
        if kind == "Ready" and value != "True":
            since = ""
            if now is not None and condition.since is not None:
                clock = time.strftime("%H:%M:%S", time.localtime(condition.since))
                since = f" since {clock} ({max(0, round(now - condition.since))} s)"
            said.append(f"NotReady{since} ({why})" if why else f"NotReady{since}")
        elif kind in PRESSURES and value == "True":
            said.append(f"short of {PRESSURES[kind]}")
    for taint in node.taints:
        key = taint.key
        words = SICK_TAINTS.get(key)
        if words and not (said and key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")):
            said.append(words)  # those two taints say again what the Ready condition said
    if node.unschedulable and not said:
        said.append("cordoned")
    return "; ".join(said)


def pod_disruption(pod: Pod) -> str:
    """How the cluster ended a pod on its node ("" where it did not): evicted, or a DisruptionTarget
    condition (taint manager, preemption, the kubelet's shutdown)."""
    if pod.reason == "Evicted":
        return f"evicted its pod: {_short(pod.message or 'the node ran short of resources', 100)}"
    for condition in pod.conditions:
        if condition.type == "DisruptionTarget" and condition.is_true:
            reason = condition.reason or "disrupted"
            return f"ended its pod ({reason}: {_short(condition.message, 100)})".replace(": )", ")")
    return ""


def bad_nodes(client: KubeClient, pods: Sequence[Pod], unread: list[str] | None = None) -> dict[str, str]:
    """The nodes a run's pods were on that the cluster marks bad (NotReady, a spot interruption
    notice, gone, a pressure, evictions), each with why: what ``torchdeck resume --avoid-node``
    is for. A node this identity may not read goes into ``unread``."""
    found: dict[str, str] = {}
    nodes: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.node:
            nodes.setdefault(pod.node, []).append(pod)
    read, forbidden = client.nodes_named(nodes)
    if unread is not None:
        unread += forbidden  # not ours to read (a namespace's user): the caller says so
    for name, on_it in sorted(nodes.items()):
        if name not in read:
            continue
        node = read[name]
        said = [node_trouble(node)] + [pod_disruption(p) for p in on_it]
        words = "; ".join(s for s in said if s)
        if words:
            found[name] = words
    return found


def cut_off(pod: Pod) -> bool:
    """Whether a live pod shows what its node's loss does to it: no longer Ready while Running (the
    node controller marks a lost node's pods so), being deleted, or marked for disruption."""
    if pod.meta.deleting is not None:
        return True
    for condition in pod.conditions:
        if condition.type == "DisruptionTarget" and condition.is_true:
            return True
        if condition.type == "Ready" and condition.status == "False" and pod.phase == "Running":
            return True
    return False


def lost_nodes(client: KubeClient, pods: Sequence[Pod], ranks: Mapping[str, int], nproc: int = 1) -> dict[str, str]:
    """The nodes a live run's pods are on that the cluster says are lost (NotReady and since when,
    unreachable, gone, tainted as going), each with the ranks it held: read only for the nodes of pods
    that show it (``cut_off``), so a healthy run's status reads no node at all."""
    found: dict[str, str] = {}
    suspects: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.node and cut_off(pod):
            suspects.setdefault(pod.node, [])
    for pod in pods:
        if pod.node in suspects:
            suspects[pod.node].append(pod)
    read, _ = client.nodes_named(suspects)  # one not this identity's to read: its pods' own findings say what they can
    for name, on_it in sorted(suspects.items()):
        if name not in read:
            continue
        trouble = node_trouble(read[name], time.time())
        if not trouble:
            continue
        held = sorted(on_it, key=lambda p: ranks.get(p.name, 0))
        found[name] = (
            f"{trouble}; it held {', '.join(_held(p.name, ranks.get(p.name), nproc) + _evicted(p) for p in held)}"
        )
    return found


def lost_node_down(node: Node | None) -> bool:
    """Whether a node can no longer end its pods itself: gone, or its kubelet silent (Ready not True,
    or the node controller's unreachable taint). A cordoned node or one short of memory still can."""
    if node is None:
        return True
    ready = next((c for c in node.conditions if c.type == "Ready"), None)
    return (ready is not None and ready.status != "True") or any(
        t.key == "node.kubernetes.io/unreachable" for t in node.taints
    )


def _evicted(pod: Pod) -> str:
    """ ", evicted at 10:53:02": the pod being deleted off its lost node (the taint's toleration ran out)."""
    if pod.meta.deleting is None:
        return ""
    marked = next((c.since for c in pod.conditions if c.type == "DisruptionTarget" and c.is_true), None)
    return ", evicted" + (f" at {time.strftime('%H:%M:%S', time.localtime(marked))}" if marked else "")


def _held(pod: str, node_rank: int | None, nproc: int) -> str:
    """ "rank 1 (pod NAME)", "ranks 8-15 (pod NAME)": the global ranks torchrun gives a node's processes."""
    if node_rank is None or node_rank < 0:
        return f"pod {pod}"
    first = node_rank * nproc
    return f"rank {first} (pod {pod})" if nproc == 1 else f"ranks {first}-{first + nproc - 1} (pod {pod})"


def coming_back(
    log: RecoveryLog,
    pods: Sequence[Pod],
    ranks: Mapping[str, int],
    nproc: int = 1,
    trouble: Callable[[str], str] = lambda node: "",
) -> list[str]:
    """The ranks whose pod was made again on another node since the run's newest attempt began, and
    which are not back in the run yet (its ranks' events say where each rank was): "rank 1's pod P made
    again on node B (it was on node A: NotReady since ...): Pending, not back in the run yet" (``trouble``:
    what is wrong with a node, "" where nothing)."""
    where, since = log.where(), log.started.get(log.attempt)
    if not where or since is None:
        return []
    out = []
    for pod in sorted(pods, key=lambda p: ranks.get(p.name, 0)):
        node_rank = ranks.get(pod.name, -1)
        was = where.get(node_rank * nproc) if node_rank >= 0 else None
        if was is None or pod.node == was or pod.meta.deleting is not None or (pod.meta.created or 0) <= since:
            continue
        place = f"on node {pod.node}" if pod.node else "(no node yet)"
        why = trouble(was)
        out.append(
            f"{ranks_words(list(range(node_rank * nproc, (node_rank + 1) * nproc)))}'s pod {pod.name} made again {place} "
            f"(it was on node {was}{': ' + why if why else ''}): {pod.phase or 'Pending'}, not back in the run yet"
        )
    return out
