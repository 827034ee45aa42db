"""Every training job on a shared cluster, not only torchdeck's: the jobs of the namespaces this
identity may list that torchdeck did not make (a teammate's, one made with kubectl, a pipeline's or
an SDK's), named by a reference, ``kind/namespace/name``, under which ``jobs`` lists them and
``status``, ``logs`` and the monitor follow them read-only (nothing is written to them, nor any pod
of theirs deleted). ``torchdeck import`` makes one a run of torchdeck's."""

from __future__ import annotations

from ..base import JobState
from ..records import JobStatus
from .kind_objects import at
from .kinds import JOB_KINDS, LISTED_ALONE, JobKind, ListedKind
from .objects import Api, ObjectMeta, as_list, as_map, conditions_of, true_condition

FOREIGN_HINT = "shown and followed read-only"
GERUND = {"stop": "stopping", "resume": "resuming", "triage": "triaging", "copy the model of": "copying the model of"}
"""The verbs refused of a job that is not torchdeck's, as the refusal says them."""


def job_ref(kind: str, namespace: str, name: str) -> str:
    """The reference of a job torchdeck did not make: ``pytorchjob/team-a/bert``."""
    return f"{kind}/{namespace}/{name}"


def parse_ref(text: str) -> tuple[JobKind | ListedKind, str, str] | None:
    """The kind, namespace and name of a job's reference (``pytorchjob/team-a/bert``; the kind as
    kubectl or the API names it: ``pytorchjobs``, ``PyTorchJob``), or None where ``text`` is none."""
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        return None
    word, namespace, name = parts
    key = word.lower().split(".", 1)[0]
    kinds: list[JobKind | ListedKind] = [*JOB_KINDS.values(), *LISTED_ALONE]
    for kind in kinds:
        if key in (kind.key, kind.key + "s", kind.kind.lower()):
            return kind, namespace, name
    return None


def made_by(meta: ObjectMeta) -> str:
    """Who made a job torchdeck did not, in a word or two (its first writer, as the cluster keeps it)."""
    manager = meta.manager
    if manager.startswith("kubectl"):
        return "kubectl"
    return manager[:40] or "someone else"


def listed_alone_status(kind: ListedKind, obj: Api, backend: str) -> JobStatus | None:
    """A row of a kind torchdeck lists but does not follow (a JobSet not made by a TrainJob); None
    where the object is shown under its owner's row (a TrainJob's JobSet)."""
    meta = ObjectMeta.from_api(obj)
    if any(ref.kind in kind.shown_by for ref in meta.controllers()):
        return None
    spec, status = as_map(obj.get("spec")), as_map(obj.get("status"))
    conditions = conditions_of(status)
    ranks = 0
    for replicated in as_list(spec.get("replicatedJobs")):
        job = as_map(replicated)
        replicas, parallelism = job.get("replicas", 1), at(job, ("template", "spec", "parallelism"))
        ranks += (replicas if isinstance(replicas, int) else 1) * (parallelism if isinstance(parallelism, int) else 1)
    if true_condition(conditions, "Completed") is not None:
        state = JobState.SUCCEEDED
    elif true_condition(conditions, "Failed") is not None:
        state = JobState.FAILED
    elif spec.get("suspend") is True:
        state = JobState.QUEUED
    else:
        state = JobState.RUNNING
    ns = meta.namespace or "default"
    return JobStatus(
        run_id=job_ref(kind.key, ns, meta.name),
        name=meta.name,
        backend=backend,
        state=state,
        world_size=ranks,
        submitted_at=meta.created or 0.0,
        location=f"{ns}/{kind.kind}",
        found_by_label=True,
        made_by=made_by(meta),
        namespace=ns,
        kind=kind.kind,
        hint=f"{kind.kind}s are listed, not followed: kubectl logs -n {ns} -l {kind.pod_label}={meta.name}",
    )


def unreadable_status(kind: JobKind, obj: Api, backend: str, error: Exception) -> JobStatus:
    """The row of another's job whose spec does not read as its kind's (a count that is no number):
    listed, with why, and nothing more read of it."""
    meta = ObjectMeta.from_api(obj)
    ns = meta.namespace or "default"
    return JobStatus(
        run_id=job_ref(kind.key, ns, meta.name),
        name=meta.name,
        backend=backend,
        state=JobState.UNKNOWN,
        world_size=0,
        submitted_at=meta.created or 0.0,
        reason=f"its spec does not read as a {kind.kind}'s: {str(error)[:120]}",
        location=f"{ns}/{kind.kind}",
        found_by_label=True,
        made_by=made_by(meta),
        namespace=ns,
        kind=kind.kind,
    )
