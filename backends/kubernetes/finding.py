"""Which job a run id names on a cluster, and what is learned of each run on the way (its kind and
place, its pods' selector and owner, whether it was found by its label alone). Every command that
names a run (status, logs, stop, triage, check, the monitor, resume) goes through ``RunFinder.job``:
an exact record of making it first, then an exact label, then a unique prefix; a recorded run only
at its recorded place and with its recorded uid (``identity.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import FoundByLabel, RunNotFound
from ..spec import KINDS, JobKindName
from .client import ApiError, KubeClient, api_path
from .fleet import FOREIGN_HINT, GERUND, job_ref, parse_ref
from .identity import FOUND_BY_LABEL, MadeRun, NotOurs, RunRecords
from .kind_objects import JobObject, Json, mapping
from .kinds import JOB_KINDS, JobKind
from .manifests import RUN_LABEL, pod_selector
from .objects import ObjectMeta
from .ownership import OwnedBy

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED = f"{MANAGED_BY}=torchdeck"


@dataclass(frozen=True)
class RunJob:
    """A run's job object as the cluster answered it, with its metadata read once: what the backend
    holds of a run between the API and its kind's readers (``JobKind``, ``jobs.py``), which take
    the object itself."""

    key: JobKindName
    obj: Json
    meta: ObjectMeta
    view: JobObject
    """What its kind reads of it (replicas, conditions, arguments), read once."""
    ref: str = ""
    """A job torchdeck did not make: its reference (``kind/namespace/name``, ``fleet.job_ref``),
    which names it where a run id names a run; "" for a run of torchdeck's."""

    @classmethod
    def read(cls, key: JobKindName, obj: object, foreign: bool = False) -> RunJob:
        data = mapping(obj) if isinstance(obj, Mapping) else {}
        meta = ObjectMeta.from_api(data)
        ref = job_ref(key, meta.namespace or "default", meta.name) if foreign else ""
        return cls(key, data, meta, JOB_KINDS[key].view(data), ref)

    @property
    def run_id(self) -> str:
        """What names it to torchdeck: its run id, or a foreign job's reference."""
        return self.ref or self.name

    @property
    def kind(self) -> JobKind:
        return JOB_KINDS[self.key]

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def namespace(self) -> str:
        return self.meta.namespace or "default"

    @property
    def path(self) -> str:
        return api_path(JOB_KINDS[self.key].api, self.namespace, self.name)


class RunFinder:
    """The runs of one backend's cluster, found by id and learned on the way. ``list_jobs`` lists
    torchdeck's job objects by a label selector (the backend's, which knows where this identity may
    list); ``namespace`` is where the backend looks (None: everywhere)."""

    def __init__(
        self,
        client: KubeClient,
        records: RunRecords,
        list_jobs: Callable[[str], list[RunJob]],
        namespace: str | None,
    ):
        self.client, self.records = client, records
        self._list_jobs, self.namespace = list_jobs, namespace
        self.kinds: dict[str, tuple[JobKindName, str]] = {}
        """run id -> (kind key, namespace), learned on the way."""
        self.selectors: dict[str, str] = {}
        """run id -> its pods' label selector, learned with the kind."""
        self.unrecorded: set[str] = set()
        """Runs found by their label alone (no record of making them): stop and resume ask first."""
        self.owners: dict[str, OwnedBy] = {}
        """run id -> which pods its job owns (learned with the job)."""
        self.uids: dict[str, str] = {}
        """run id -> the uid of the job learned for it (kept in a copy for another process, where
        ``owners`` is made again as the copy finds the job)."""

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "owners": {}}

    def job(self, run_id: str) -> RunJob:
        """The run's job object: through torchdeck's record of making it where there is one (the
        object at the recorded place, and only with the recorded uid), else by its label, marked
        found-by-label (``unrecorded``). ``run_id`` may be a unique prefix: an exact record, then
        an exact label, win over any prefix."""
        if "/" in run_id:
            return self._foreign(run_id)
        records = self.records.on(self.client.server) if run_id else {}
        if run_id in records:
            return self._through_record(records[run_id])
        known = self.kinds.get(run_id) if run_id in self.unrecorded else None
        if known is not None and run_id in self.uids:  # found by label before: the same object, where it was
            with contextlib.suppress(RunNotFound):
                job = self._same_object(run_id, *known)
                self.learn(job)
                return job
        jobs = self._list_jobs(f"{RUN_LABEL}={run_id}")
        if not jobs:
            live = {j.name: j for j in self._list_jobs(MANAGED)}
            names = sorted({n for n in [*records, *live] if n.startswith(run_id)})
            if len(names) > 1:
                raise RunNotFound(f"{run_id!r} matches several runs: {', '.join(names[:5])}", "give more of the id")
            if names and names[0] in records:
                return self._through_record(records[names[0]])
            jobs = [live[names[0]]] if names else []
        return self._by_label(run_id, jobs, records)

    def _by_label(self, run_id: str, jobs: list[RunJob], records: Mapping[str, MadeRun]) -> RunJob:
        """The one job that carries the run's label, where torchdeck has no record of making it."""
        if not jobs:
            where = f"namespace {self.namespace}" if self.namespace else "any namespace"
            raise RunNotFound(
                f"no run {run_id!r} in {where} of this cluster",
                "torchdeck --backend kubernetes jobs lists them; --namespace picks another",
            )
        if len(jobs) > 1:  # the same run label in several places, none of them recorded here
            places = ", ".join(sorted(f"{j.meta.namespace or '?'}/{JOB_KINDS[j.key].kind}" for j in jobs))
            raise RunNotFound(
                f"{len(jobs)} objects carry the label of run {run_id!r} ({places[:200]}), and torchdeck has no "
                "record of making any of them here",
                "--namespace picks one; kubectl get -o yaml shows who made each",
            )
        job = jobs[0]
        if job.name in records:  # a copy of a recorded run's name elsewhere: not that run
            raise NotOurs(
                f"{JOB_KINDS[job.key].kind} {job.meta.namespace or '?'}/{job.name} carries the "
                "name and label of a run torchdeck recorded making elsewhere, and is not it",
                f"torchdeck status {job.name} shows the recorded one",
            )
        self.unrecorded.add(job.name)
        self.learn(job)
        return job

    def _foreign(self, ref: str) -> RunJob:
        """A job torchdeck did not make, by its reference (``kind/namespace/name``): followed
        read-only. A reference to one of torchdeck's runs is that run."""
        found = parse_ref(ref)
        if found is None:
            raise RunNotFound(
                f"{ref!r} is neither a run id nor a job's reference (kind/namespace/name)",
                "torchdeck --backend kubernetes jobs lists every training job with its reference",
            )
        kind, ns, name = found
        if not isinstance(kind, JobKind):
            raise RunNotFound(
                f"{kind.kind} {ns}/{name} is listed, not followed: torchdeck follows the kinds it runs",
                f"kubectl logs -n {ns} -l {kind.pod_label}={name}",
            )
        try:
            obj = self.client.request("GET", api_path(kind.api, ns, name))
        except ApiError as exc:
            if exc.status != 404:
                raise
            raise RunNotFound(
                f"no {kind.kind} {ns}/{name} in this cluster",
                "torchdeck --backend kubernetes jobs lists every training job with its reference",
            ) from None
        try:
            job = RunJob.read(kind.key, obj, foreign=True)
        except (ValueError, TypeError) as exc:
            from ..errors import BackendError

            raise BackendError(
                f"{kind.kind} {ns}/{name}'s spec does not read as a {kind.kind}'s: {str(exc)[:120]}",
                f"kubectl get -n {ns} {kind.plural} {name} -o yaml shows it",
            ) from None
        if job.meta.labels.get(RUN_LABEL) == job.name and job.meta.labels.get(MANAGED_BY) == "torchdeck":
            with contextlib.suppress(RunNotFound, NotOurs):
                run = self.job(job.name)
                if run.meta.uid == job.meta.uid:
                    return run  # one of torchdeck's runs, by its place
            # torchdeck's labels on another object than the run of that name: followed as another's
        self.unrecorded.add(job.run_id)
        self.learn(job)
        return job

    def _through_record(self, made: MadeRun) -> RunJob:
        job = self._recorded_job(made)
        self.unrecorded.discard(made.run_id)
        self.learn(job)
        return job

    def recorded_id(self, run_id: str) -> str:
        """The recorded run ``run_id`` names, exactly or as the unique prefix of one (its job may be
        gone: a stopped run); ``run_id`` itself where none does."""
        records = self.records.on(self.client.server) if run_id and "/" not in run_id else {}
        if run_id in records:
            return run_id
        prefixed = sorted(r for r in records if r.startswith(run_id))
        if len(prefixed) > 1:
            raise RunNotFound(f"{run_id!r} matches several runs: {', '.join(prefixed[:5])}", "give more of the id")
        return prefixed[0] if prefixed else run_id

    def made(self, run_id: str) -> MadeRun | None:
        """The record of ``run_id`` on this cluster (exactly that id), if torchdeck made it here."""
        if "/" in run_id or not run_id:
            return None
        return self.records.on(self.client.server).get(run_id)

    def _recorded_job(self, made: MadeRun) -> RunJob:
        """The live object where ``made`` says, if it is the one torchdeck made (its uid)."""
        info = JOB_KINDS[made.kind]
        try:
            obj = self.client.request("GET", api_path(info.api, made.namespace, made.name))
        except ApiError as exc:
            if exc.status != 404:
                raise
            raise RunNotFound(
                f"no run {made.run_id!r} on the cluster now: its {info.kind} {made.namespace}/{made.name} is gone",
                "a stopped run's job is deleted; torchdeck resume continues it from its checkpoint",
            ) from None
        job = RunJob.read(made.kind, obj)
        uid = job.meta.uid or None
        if uid != made.uid:
            raise NotOurs(
                f"{info.kind} {made.namespace}/{made.name} is not the run torchdeck made as {made.run_id}: "
                f"its uid is {uid}, the one recorded at submit {made.uid} (another object took its name)",
                f"torchdeck will not follow, stop or resume it; kubectl -n {made.namespace} get {info.plural} "
                f"{made.name} -o yaml shows who made it",
            )
        return job

    def _same_object(self, run_id: str, key: JobKindName, ns: str) -> RunJob:
        """The object found by label before, if it is still there with the same uid."""
        try:
            obj = self.client.request("GET", api_path(JOB_KINDS[key].api, ns, run_id))
        except ApiError as exc:
            if exc.status != 404:
                raise
            raise RunNotFound(f"no run {run_id!r}", "") from None
        job = RunJob.read(key, obj)
        if job.meta.uid != self.uids.get(run_id):
            raise RunNotFound(f"{run_id!r} was made again", "")
        return job

    def learn(self, job: RunJob) -> None:
        """Keep what a found job says of its run: its kind and place, its pods' selector and owner."""
        ns = job.meta.namespace or self.namespace or "default"
        # another's job: its pods carry what its controller gives them, never torchdeck's label
        foreign = f"{job.kind.pod_label}={job.name}" if job.ref and job.kind.pod_label else ""
        self.learned(job.run_id, job.key, ns, foreign or pod_selector(job.obj), job.meta.uid)

    def learned(self, run_id: str, key: JobKindName, namespace: str, selector: str, uid: str | None) -> None:
        """Keep what is known of a run: its kind and place, its pods' selector, and its job's uid
        (which pods it owns; none: every pod the selector finds)."""
        self.kinds[run_id] = (key, namespace)
        self.selectors[run_id] = selector
        if not uid:
            self.owners.pop(run_id, None)
            self.uids.pop(run_id, None)
            return
        self.uids[run_id] = uid
        if run_id not in self.owners or self.owners[run_id].uid != uid:
            self.owners[run_id] = OwnedBy(self.client, namespace, uid)

    def found_by_label(self, run_id: str) -> bool:
        """Whether the run was found by its label alone (torchdeck has no record of making it here)."""
        return run_id in self.unrecorded

    def require_made(self, name: str, trust_label: bool, verb: str) -> None:
        """Refuse to ``verb`` a run found by its label alone, unless the user said it is theirs; and
        a job torchdeck did not make (a reference) always: it is followed read-only."""
        if "/" in name:
            raise NotOurs(
                f"{name} is not torchdeck's ({FOREIGN_HINT}); not {GERUND.get(verb, verb)} it",
                f"torchdeck --backend kubernetes import {name} makes it a run of torchdeck's; else ask its "
                "owner, or kubectl",
            )
        if name in self.unrecorded and not trust_label:
            key, ns = self.kinds.get(name, (KINDS[0], "?"))
            raise FoundByLabel(
                f"{JOB_KINDS[key].kind} {ns}/{name} was {FOUND_BY_LABEL}; not {GERUND.get(verb, verb)} it on a label's word",
                f"if it is yours (made from another machine), say so: torchdeck {verb} {name} --yes",
            )

    def selector(self, run_id: str) -> str:
        """The label selector of the run's pods."""
        return self.selectors.get(run_id) or f"{RUN_LABEL}={run_id}"

    def owner(self, run_id: str) -> OwnedBy | None:
        """Which pods the run's job owns (None: not learned, or a job without a uid)."""
        return self.owners.get(run_id)
