"""Training job objects as the cluster holds them: where each kind lives,
the run id of a new job, and the readers that turn a PyTorchJob, TrainJob,
MPIJob, indexed Job or ElasticJob (and its pods) into torchdeck's state
table: ``job_state`` maps every kind's conditions onto one ``JobState``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from ..base import JobState
from ..schema import count
from ..spec import JobKindName
from .client import KINDS, ApiKind
from .kinds import JOB_KINDS, KEY_BY_KIND


def api_of(kind: str) -> str | ApiKind:
    """A rendered object's kind as ``api_path`` takes it: a built-in's name, or a job kind's ApiKind."""
    return kind if kind in KINDS else JOB_KINDS[KEY_BY_KIND[kind]].api


def timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def walk_volumes(obj: Any) -> list[dict[str, Any]]:
    """Every volume declared anywhere in a job object."""
    found: list[dict[str, Any]] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "volumes" and isinstance(value, list):
                found += [v for v in value if isinstance(v, dict)]
            else:
                found += walk_volumes(value)
    elif isinstance(obj, list):
        for value in obj:
            found += walk_volumes(value)
    return found


def world_size(key: JobKindName, obj: dict[str, Any]) -> int:
    spec = obj.get("spec") or {}
    nproc = nproc_per_node(obj)
    if key == "pytorchjob":
        return nproc * sum(r.get("replicas", 1) for r in (spec.get("pytorchReplicaSpecs") or {}).values())
    if key == "mpijob":
        return nproc * ((spec.get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("replicas", 1)
    if key == "job":
        return nproc * spec.get("completions", 1)
    if key == "trainjob":
        return nproc * (spec.get("trainer") or {}).get("numNodes", 1)
    if key == "elasticjob":
        return nproc * ((spec.get("replicaSpecs") or {}).get("Worker") or {}).get("replicas", 1)
    return nproc


def nproc_per_node(obj: dict[str, Any]) -> int:
    """Ranks per pod, read back from the job (so any machine can reattach)."""
    spec = obj.get("spec") or {}
    for value in (spec.get("nprocPerNode"), (spec.get("trainer") or {}).get("numProcPerNode")):
        ranks = count(int(value) if isinstance(value, str) and value.isdigit() else value)
        if ranks:  # "auto", "gpu": the ranks per pod are not known here
            return ranks
    nproc = argument(obj, "--nproc-per-node")
    return int(nproc) if nproc and nproc.isdigit() else 1


def string_lists(node: object) -> Iterator[list[str]]:
    """Every list of strings in a job object: its containers' commands and args."""
    if isinstance(node, dict):
        for value in node.values():
            yield from string_lists(value)
    elif isinstance(node, list):
        if node and all(isinstance(v, str) for v in node):
            yield node
        for value in node:
            yield from string_lists(value)


def argument(obj: dict[str, Any], flag: str) -> str | None:
    """The value after ``flag`` in the job's container arguments, if any."""
    for words in string_lists(obj.get("spec") or {}):
        if flag in words[:-1]:
            return words[words.index(flag) + 1]
    return None


def first_pod_spec(node: Any) -> dict[str, Any]:
    """The first pod spec in a job object (a TrainJob's is its override of the runtime's)."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list) and node["containers"]:
            return node
        values: Iterable[Any] = node.values()
    elif isinstance(node, list):
        values = node
    else:
        return {}
    for value in values:
        found = first_pod_spec(value)
        if found:
            return found
    return {}


KUBEFLOW_STATES = (
    ("Succeeded", JobState.SUCCEEDED),
    ("Failed", JobState.FAILED),
    ("Restarting", JobState.RUNNING),
    ("Running", JobState.RUNNING),
    ("Suspended", JobState.PENDING),
    ("Created", JobState.PENDING),
)


def job_state(key: JobKindName, obj: dict[str, Any], pods: list[dict[str, Any]]) -> tuple[JobState, str]:
    """The job's own conditions mapped onto JobState, with the condition's message."""
    st = obj.get("status") or {}
    conditions = {c.get("type"): c for c in st.get("conditions") or [] if c.get("status") == "True"}
    if key == "job":
        if "Complete" in conditions:
            return JobState.SUCCEEDED, ""
        if "Failed" in conditions:
            return JobState.FAILED, conditions["Failed"].get("message") or conditions["Failed"].get("reason", "")
        return (JobState.RUNNING if st.get("active") and any_running(pods) else JobState.PENDING), ""
    if key == "trainjob":
        if "Complete" in conditions:
            return JobState.SUCCEEDED, ""
        if "Failed" in conditions:
            return JobState.FAILED, conditions["Failed"].get("message", "")
        return (JobState.RUNNING if any_running(pods) else JobState.PENDING), ""
    for kind, state in KUBEFLOW_STATES:
        if kind in conditions:
            message = conditions[kind].get("message", "") if state is JobState.FAILED or kind == "Restarting" else ""
            if state is JobState.RUNNING and not any_running(pods) and pods:
                return JobState.PENDING, message
            return state, message
    return JobState.PENDING, ""


def any_running(pods: list[dict[str, Any]]) -> bool:
    return any((p.get("status") or {}).get("phase") == "Running" for p in pods)
