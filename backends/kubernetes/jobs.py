"""Training job objects as the cluster holds them: the API path of a rendered object's kind, and
the readers that turn a job of any kind (and its pods) into torchdeck's state table. What differs
by kind (where its replicas are, how its conditions read) is its ``JobKind``'s to say; these read a
job through its kind's typed view (``kind_objects.JobObject``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..base import JobState
from ..schema import count
from .client import KINDS, ApiKind
from .kind_objects import JobObject
from .kinds import JOB_KINDS, KEY_BY_KIND, JobKind
from .objects import Pod


def api_of(kind: str) -> str | ApiKind:
    """A rendered object's kind as ``api_path`` takes it: a built-in's name, or a job kind's ApiKind."""
    return kind if kind in KINDS else JOB_KINDS[KEY_BY_KIND[kind]].api


def walk_volumes(obj: object) -> list[dict[str, object]]:
    """Every volume declared anywhere in a job object."""
    found: list[dict[str, object]] = []
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


def world_size(kind: JobKind, job: JobObject) -> int:
    """The job's ranks: its kind's pods that run ranks, times the ranks per pod."""
    return nproc_per_node(job) * kind.nodes(job)


def nproc_per_node(job: JobObject) -> int:
    """Ranks per pod, read back from the job (so any machine can reattach)."""
    for value in (job.field("nprocPerNode"), job.field("trainer", "numProcPerNode")):
        ranks = count(int(value) if isinstance(value, str) and value.isdigit() else value)
        if ranks:  # "auto", "gpu": the ranks per pod are not known here
            return ranks
    nproc = argument(job, "--nproc-per-node")
    return int(nproc) if nproc and nproc.isdigit() else 1


def argument(job: JobObject, flag: str) -> str | None:
    """The value after ``flag`` in the job's container arguments, if any."""
    for words in job.string_lists():
        if flag in words[:-1]:
            return words[words.index(flag) + 1]
    return None


def first_pod_spec(node: object) -> dict[str, object]:
    """The first pod spec in a job object (a TrainJob's is its override of the runtime's)."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list) and node["containers"]:
            return node
        values: Iterable[object] = node.values()
    elif isinstance(node, list):
        values = node
    else:
        return {}
    for value in values:
        found = first_pod_spec(value)
        if found:
            return found
    return {}


def job_state(kind: JobKind, job: JobObject, pods: Sequence[Pod]) -> tuple[JobState, str]:
    """The job's own conditions mapped onto JobState, with the condition's message."""
    return kind.state(job, pods)
