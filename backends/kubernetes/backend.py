"""The kubernetes backend: a run is a PyTorchJob (or TrainJob, MPIJob,
indexed Job, ElasticJob) on any cluster in the kubeconfig, EKS or kind or
minikube alike, through the official ``kubernetes`` client.

The run id is the job object's name; every object and pod of a run carries
the ``torchdeck.dev/run`` label. That label is a search hint, not an identity (anyone may make an
object with it): what torchdeck made is what it recorded at submit (``identity.py``: the cluster,
namespace, kind, name and uid), and a run's pods are those its job owns (``ownership.py``). A run
found by its label alone, from another machine, is followed and shown as such, and stopped or
resumed only when the user says so.

Pods are followed by list + watch and every rank's pod log at once, one
stream per pod (kubectl stops at 5), across container restarts
(``kube_streams``); the trainer's metric lines in those logs feed the
monitor exactly as the local backend's files do. What is wrong is read from
the pods in ``kube_diagnosis``.

Why one module of this size: it is the ``Backend`` interface's one class for a cluster (submit,
status, stop, logs, metrics); what stands apart is elsewhere: the API connection
(``client.py``), streams (``streams.py``), node figures (``node_metrics.py``), the task jobs
(``tasks.py``), the preflight, the manifests and the job states (``jobs.py``)."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ...trainer import options as trainer_options
from ...trainer.s3url import S3Url
from ..base import (
    Backend,
    GateStep,
    JobState,
    JobStatus,
    LogLine,
    MetricEvent,
    NodeMetrics,
    Plan,
    Progress,
    TestResult,
    as_test_result,
    silent,
)
from ..bundle import CodeStore
from ..capabilities import (
    CifarTasks,
    ClusterViews,
    DataReady,
    HangTriage,
    HealthGate,
    JobAdoption,
    NodeCordon,
    NodeMeasures,
)
from ..cost import PriceBook, RunCost, SpotPrice, budget_stop_words, price_run
from ..errors import BackendError, FoundByLabel, RunIdTaken, RunNotFound, SpecError
from ..events import parse_metric_lines
from ..names import new_run_id
from ..records import QueueWait
from ..schema import number
from ..spec import JobKindName, JobSpec, spec_from_dict, validate
from ..triage import Triage, triage_line
from ..views import NodesView, QueuesView
from . import crds
from .board import read_nodes_view, read_queues_view
from .client import ApiError, ApiKind, KubeClient, api_path
from .costs import (
    COST_ANNOTATION,
    STOPPED_ANNOTATION,
    NodeBook,
    annotate,
    node_uses,
    read_annotation,
)
from .diagnosis import (
    Finding,
    bad_nodes,
    job_findings,
    lost_node_down,
    lost_nodes,
    node_trouble,
    pod_findings,
)
from .figures import PODS_READ, ROW_READS, log_lines, read_progress, row_figures, text_reader
from .finding import MANAGED, MANAGED_BY, RunFinder, RunJob
from .fleet import listed_alone_status, made_by, unreadable_status
from .gate import run_gate
from .identity import FOUND_BY_LABEL, MadeRun, RunRecords, made_now
from .importing import import_job
from .jobs import (
    api_of,
    argument,
    first_pod_spec,
    job_state,
    nproc_per_node,
    walk_volumes,
    world_size,
)
from .kind_objects import Json, PodTemplate, Volume, at, mapping
from .kinds import JOB_KINDS, LISTED_ALONE
from .manifests import (
    CODE_LABEL,
    FORCE_DELETE_ANNOTATION,
    JOB_LABEL,
    POD_STUCK_AFTER_S,
    PODS_ANNOTATION,
    PROGRAM_ANNOTATION,
    QUEUE_LABEL,
    RESUMES_LABEL,
    RUN_LABEL,
    SPEC_ANNOTATION,
    Rendered,
    kept_spec,
    pod_selector,
    render,
    rendered_plan,
    run_labels,
)
from .node_metrics import measure_nodes
from .objects import ObjectMeta, Pod, timestamp
from .objects import items as items_of
from .ownership import OwnedBy
from .preflight import preflight
from .queues import queue_findings, queue_wait, suspended, wait_words
from .streams import PodLogFollower, has_started, node_ranks
from .tasks import TaskJobs
from .watched import WatchedPods

if TYPE_CHECKING:
    from ..health import GateResult
    from ..spec_options import Where


def spec_of(job: RunJob) -> JobSpec | None:
    """The spec kept on a job (``SPEC_ANNOTATION``); None where there is none or it does not read."""
    kept = read_annotation(job.obj, SPEC_ANNOTATION)
    if kept is None:
        return None
    try:
        return spec_from_dict(kept, f"{job.name}'s {SPEC_ANNOTATION}")
    except SpecError:
        return None


CRD_CACHE_S = 5.0
NODE_METRICS_TTL_S = 5.0


OFFLINE = "preflight not run: render reads no cluster (train --backend kubernetes --dry-run checks one)"


def with_code_bucket(spec: JobSpec, bucket: str | None) -> JobSpec:
    """The spec with ``bucket`` for large code bundles, where it names none of its own."""
    if spec.builtin or spec.cluster.code_bucket or not bucket:
        return spec
    return dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, code_bucket=bucket))


def offline_plan(
    spec: JobSpec, run_id: str | None = None, release: str | None = None, code_bucket: str | None = None
) -> Plan:
    """``torchdeck render``: the plan ``KubernetesBackend.plan`` makes, made with no cluster to ask.
    The same run id rule (offline every id is free: the job's name and the time), the operator
    release named (``--release``) or the newest torchdeck writes for, said as such, the code bucket
    configured for large bundles, the health gate as its first step; the preflight is not run."""
    spec = with_code_bucket(validate(spec), code_bucket)
    kind = spec.cluster.kind
    notes = [OFFLINE]
    if JOB_KINDS[kind].builtin:
        target = None
    elif release:
        target = JOB_KINDS[kind].named(release)
    else:
        target = JOB_KINDS[kind].latest
        if target is not None:
            notes.append(
                f"written for {target.release}, the newest release torchdeck knows: --release names the one your "
                "cluster runs (train --backend kubernetes --dry-run reads it from the cluster)"
            )
    plan = rendered_plan(
        "kubernetes", spec, render(spec, run_id or new_run_id(spec.name, lambda _: False), target=target), notes=notes
    )
    plan.gate = GateStep() if spec.cluster.health_gate else None
    return plan


class KubernetesBackend(
    Backend, HealthGate, NodeCordon, NodeMeasures, CifarTasks, HangTriage, JobAdoption, ClusterViews
):
    """Jobs on a Kubernetes cluster, through one connection (``client``, a ``KubeClient``): the
    backend holds a client rather than being one, so what needs only the API (the preflight, the
    pod and log streams) takes the client."""

    name = "kubernetes"
    fields: Where = "cluster"
    every_s: ClassVar[float] = 5.0
    """Node figures: metrics-server has new ones every 15 s (its --metric-resolution), a DCGM
    exporter every few seconds; read every second, 1,000 nodes' were a twentieth of a core."""

    def __init__(
        self,
        kubeconfig: str | Path | None = None,
        context: str | None = None,
        namespace: str | None = None,
        ledger_dir: str | Path | None = None,
        code_bucket: str | None = None,
        node_price_per_hour: float | None = None,
        spot_price: SpotPrice | None = None,
        code_store: CodeStore | None = None,
    ):
        self.client = KubeClient(kubeconfig, context)
        """The connection to the cluster: every API request goes through it."""
        self.node_price_per_hour = node_price_per_hour
        """What a node costs an hour where its instance type is not in the price table (the settings')."""
        self.spot_price = spot_price
        """A spot node's price an hour now (the eks backend's, from EC2); None: spot at on-demand."""
        self.node_book = NodeBook()
        """The cluster's nodes (their instance types), for what runs cost."""
        self.code_store = code_store
        """Where code bundles too large for a ConfigMap go (``bundle.CodeStore``: S3)."""
        self.code_bucket = code_bucket
        """Where a code bundle too large for a ConfigMap goes when the spec says nothing (eks: the
        cluster's model bucket)."""
        self.sent: builtins.list[str] = []
        """What the last submit sent of the user's code: the ConfigMap or S3 object it made (empty:
        the cluster had the bundle already, or the job runs the built-in trainer)."""
        self.ledger_dir = Path(ledger_dir) if ledger_dir else None
        """Where the ledger is: jobs submitted are recorded there (None: not recorded)."""
        self.namespace = namespace
        """Where to look for runs; None: every namespace (or, where that is forbidden, the context's)."""
        self._node_cache: dict[str, tuple[float, list[NodeMetrics]]] = {}
        self._crds: dict[str, tuple[float, Json]] = {}
        """kind -> (when read, the cluster's CRD)."""
        self.tasks = TaskJobs(self.client, self.apply_rendered)
        """The one-pod jobs around training: data prepare, model copy, model test."""
        self.records = RunRecords(self.ledger_dir / "made" if self.ledger_dir else None)
        """What torchdeck made on clusters, as recorded at submit: a run is found through these."""
        self.runs = RunFinder(self.client, self.records, self._list_jobs, namespace)
        """Which job a run id names, and what was learned of each run on the way."""
        self.watched = WatchedPods(self.client)
        """A big run's pods, kept by a watch while it is followed (``watched``)."""
        self._unseen: dict[str, str] = {}
        """What this identity may not see that a listing would show (a namespace's user on a shared
        cluster), one line each, by what was asked (``unseen``)."""

    def __getstate__(self) -> dict:
        """A copy for another process: it opens its own connection (the client's own pickling)."""
        return {**self.__dict__, "_node_cache": {}, "_crds": {}}

    @property
    def scope(self) -> str:
        return f"kubernetes-{self.client.context or 'current-context'}"

    @property
    def kubeconfig(self) -> str | None:
        """The kubeconfig file the connection reads (None: $KUBECONFIG or ~/.kube/config)."""
        return self.client.kubeconfig

    # -- rendering and submitting ---------------------------------------------------

    def plan(self, spec: JobSpec) -> Plan:
        """The objects a submit creates (for the operator release the cluster serves), under a run id
        free on the cluster now, with what the preflight finds; where the cluster cannot be reached
        the objects are still planned, and a note says the preflight was not run."""
        spec = self.with_code_bucket(validate(spec))
        try:
            target = self.served_target(spec.cluster.kind)
        except BackendError:  # unreachable, or serves no version we render: the preflight below says which
            target = None
        notes: builtins.list[str] = []
        try:
            run_id = new_run_id(spec.name, self._run_taken)
        except BackendError as exc:
            run_id, unreachable = new_run_id(spec.name, lambda _: False), str(exc)
        else:
            unreachable = ""
        rendered = render(spec, run_id, target=target)
        found: builtins.list[Finding] = []
        if unreachable:
            notes.append(f"preflight not run: {unreachable}")
        else:
            try:
                found = preflight(self.client, spec, rendered, self.crd(rendered.kind))
                view = queue_findings(self.client, spec)[1] if spec.cluster.queue else None
                notes += [view.line()] if view else []
            except BackendError as exc:
                notes.append(f"preflight not run: {exc}")
        plan = rendered_plan(self.name, spec, rendered, found, notes)
        plan.gate = GateStep() if spec.cluster.health_gate else None
        return plan

    def crd(self, kind: JobKindName) -> Json | None:
        """The CustomResourceDefinition the cluster holds for ``kind`` (None: not installed; empty: the
        kubeconfig may not read CRDs, as a namespace's user of a shared cluster often may not). One
        found is kept CRD_CACHE_S (it is hundreds of kB, and a submit wants it for the render and
        the preflight); "not installed" is asked again, so an operator installed a moment ago counts."""
        cached = self._crds.get(kind)
        if cached and time.monotonic() - cached[0] < CRD_CACHE_S:
            return cached[1]
        info = JOB_KINDS[kind]
        try:
            definition = self.client.request("GET", api_path("CustomResourceDefinition", name=info.crd_name))
        except ApiError as exc:
            if exc.status == 403:
                return {}
            if exc.status != 404:
                raise
            return None
        self._crds[kind] = (time.monotonic(), definition)
        return definition

    def served_target(self, kind: JobKindName) -> crds.Target | None:
        """The operator release to render ``kind`` for, read from the cluster's CRD (the newest
        supported where the CRD is not there to read); BackendError where it serves none we render."""
        if JOB_KINDS[kind].builtin:
            return None
        definition = self.crd(kind)
        return JOB_KINDS[kind].target_for(definition) if definition else JOB_KINDS[kind].latest

    def with_code_bucket(self, spec: JobSpec) -> JobSpec:
        """The spec with this backend's bucket for large code bundles, where it names none."""
        return with_code_bucket(spec, self.code_bucket)

    def start(self, plan: Plan, progress: Progress = silent) -> str:
        """Send the plan's code bundle where it goes and create the plan's objects, in order."""
        rendered = plan.payload
        if not isinstance(rendered, Rendered):
            raise BackendError(f"this plan was not made by the {self.name} backend", "make it with plan(spec)")
        self.sent = []
        if rendered.bundle is not None and rendered.bundle_url:
            self._upload_bundle(rendered.bundle.data, rendered.bundle_url)
        job = self.create(plan.spec, rendered)
        code_dir = str(Path(plan.spec.entrypoint.code).resolve()) if rendered.bundle is not None else None
        self._keep_spec(plan.run_id, plan.spec)
        made = made_now(
            plan.run_id,
            self.client.server,
            self.client.current_context(),
            plan.spec.namespace,
            rendered.kind,
            job,
            code_dir,
        )
        if made.uid:  # (an API server always gives one: without it nothing could tell the job from a copy)
            self.records.add(made)
        uid = ObjectMeta.from_api(job).uid
        self.runs.learned(plan.run_id, rendered.kind, plan.spec.namespace, pod_selector(rendered.main), uid)
        return plan.run_id

    def gated(self, plan: Plan, result: GateResult, progress: Progress) -> Plan:
        """``plan`` after its health gate: where nodes fell short, its objects written again under
        the same run id and for the same operator release, kept off them (``cluster.avoid_nodes``)."""
        short = sorted(set(result.short) - set(plan.spec.cluster.avoid_nodes))
        if not short:
            progress(f"health gate: every node passed ({len(result.nodes)} measured)")
            return plan
        for node in short:
            progress(f"health gate: {node} fell short: {result.short[node]}")
        progress(f"health gate: the run is kept off {', '.join(short)}")
        c = plan.spec.cluster
        spec = dataclasses.replace(
            plan.spec, cluster=dataclasses.replace(c, avoid_nodes=sorted({*c.avoid_nodes, *short}))
        )
        target = plan.payload.target if isinstance(plan.payload, Rendered) else None
        return rendered_plan(self.name, spec, render(spec, plan.run_id, target=target), notes=plan.notes)

    def check(
        self, spec: JobSpec | None = None, step: GateStep = GateStep(), progress: Progress = silent
    ) -> GateResult:
        """The health gate on the nodes a run of ``spec`` would use: ``health.gate_spec`` submitted
        as a run of the same kind (so placed, queued and admitted as the run would be), waited for,
        its answer read from rank 0's log, then deleted. The answer is judged (``health.judge``,
        with each node's instance type) and kept in the state folder for ``status``."""
        if spec is None:
            raise BackendError("the health gate on a cluster needs the run's spec", "torchdeck check SPEC (or flags)")
        return run_gate(self, spec, step, progress)

    def cordon(self, node: str) -> None:
        """Mark a node unschedulable (``kubectl cordon``): what it runs stays, nothing new lands."""
        self.client.request("PATCH", api_path("Node", name=node), body={"spec": {"unschedulable": True}})

    def uncordon(self, node: str) -> bool:
        """Let pods be scheduled on a node again (``kubectl uncordon``); False where it was not cordoned."""
        try:
            found = self.client.read_node(node)
        except ApiError as exc:
            if exc.status == 404:
                raise BackendError(f"no node {node} in this cluster", "kubectl get nodes lists them") from None
            raise
        if found is None or not found.unschedulable:
            return False
        self.client.request("PATCH", api_path("Node", name=node), body={"spec": {"unschedulable": False}})
        return True

    def _run_taken(self, run_id: str) -> bool:
        """Whether a job of any kind, in any namespace, carries this run id (ids name runs cluster-wide)."""
        return bool(self._list_jobs(f"{RUN_LABEL}={run_id}"))

    def apply_rendered(self, spec: JobSpec, rendered: Rendered, checked: JobSpec) -> None:
        """Preflight ``checked``, then create the objects in order (a task job: data prepare, model
        test); the first problem stops it in one line."""
        problems = preflight(self.client, checked, rendered, self.crd(rendered.kind))
        if problems:
            more = f" (and {len(problems) - 1} more: torchdeck train --dry-run lists them)" if len(problems) > 1 else ""
            raise BackendError(f"{problems[0].where}: {problems[0].problem}{more}", problems[0].fix)
        self.create(spec, rendered)

    def create(self, spec: JobSpec, rendered: Rendered) -> Json:
        """Create the objects in order; the job object as the API server answered (with its uid).
        RunIdTaken where the first object named for the run exists already (nothing of it was made)."""
        made = False
        job: Json = {}
        for obj in rendered.objects:
            bundle = obj["kind"] == "ConfigMap" and CODE_LABEL in obj["metadata"]["labels"]
            try:
                answer = self.client.request("POST", api_path(api_of(obj["kind"]), spec.namespace), body=obj)
            except ApiError as exc:
                if bundle and exc.status == 409:
                    continue  # named by its digest: this code was sent before
                if exc.status == 409 and not made:
                    raise RunIdTaken(exc.message, exc.hint) from None
                raise
            made = made or not bundle
            if obj is rendered.main:
                job = answer if isinstance(answer, Mapping) else {}
            if bundle:
                self.sent.append(f"configmap {spec.namespace}/{obj['metadata']['name']}")
            self._note(api_path(api_of(obj["kind"]), spec.namespace, obj["metadata"]["name"]))
        return job

    def _upload_bundle(self, data: bytes, url: str) -> None:
        """Put a code bundle where its URL says, through the store this backend was handed."""
        if self.code_store is None:
            raise BackendError(
                f"the code bundle goes to {url}, and this backend was opened without a store for it",
                "open it with open_backend (which hands it the S3 store), or drop cluster.code_bucket",
            )
        if self.code_store.put(url, data):
            self.sent.append(url)

    # -- the ledger -------------------------------------------------------------------

    def _note(self, path: str) -> None:
        """Record an object made for a run in the ledger, under the cluster torchdeck made for the
        context (where it did)."""
        if self.ledger_dir is None:
            return
        from ..ledger import Ledger

        ledger = Ledger(self.ledger_dir)
        place = ledger.place(self.client.current_context())
        ledger.add(
            "k8s-object",
            f"{place.context}/{path}",
            region=place.region,
            account=place.account,
            scope=place.scope,
            detail={"context": place.context, "kubeconfig": self.kubeconfig or "", "path": path, "rank": 0},
        )

    def _forget(self, path: str) -> None:
        if self.ledger_dir is None:
            return
        from ..ledger import Ledger

        ledger = Ledger(self.ledger_dir)
        place = ledger.place(self.client.current_context())
        ledger.gone("k8s-object", f"{place.context}/{path}", place.region)

    # -- finding runs ---------------------------------------------------------------

    def _listed(self, api: ApiKind, plural: str, selector: str | None) -> builtins.list[Json]:
        """Every object of a kind matching ``selector`` (None: every one) where this identity may
        list: in every namespace (or ``namespace``), else the context's namespace, said once in
        ``unseen``; none where the kind is not installed or not this identity's to see."""
        namespace = self.namespace
        while True:
            try:
                query = {"labelSelector": selector} if selector else None
                return items_of(self.client.request("GET", api_path(api, namespace), query=query))
            except ApiError as exc:
                if exc.status == 403 and namespace is None:  # may not list cluster-wide: the context's
                    namespace = self.client.context_namespace or "default"
                    self._unseen[f"list {plural}"] = (
                        f"may not list {plural} in every namespace: those in {namespace} only"
                    )
                    continue
                if exc.status == 403:
                    self._unseen[f"list {plural} in {namespace}"] = f"may not list {plural} in namespace {namespace}"
                if exc.status in (403, 404):
                    return []  # kind not installed, or not ours to see
                raise

    def _list_jobs(self, selector: str) -> list[RunJob]:
        """Every torchdeck job object matching ``selector``, of every installed kind."""
        found: list[RunJob] = []
        for key, kind in JOB_KINDS.items():
            jobs = [RunJob.read(key, item) for item in self._listed(kind.api, kind.plural, selector)]
            # a run's job carries its own name as its run label: another value is no run of that name
            found += [job for job in jobs if job.meta.labels.get(RUN_LABEL) == job.name]
        return found

    def _fleet(self) -> tuple[builtins.list[RunJob], builtins.list[RunJob], builtins.list[JobStatus]]:
        """Every training job this identity may list, one request a kind: torchdeck's (by its
        labels, as ``_list_jobs`` finds them), the others of the kinds it runs (followed read-only
        by reference), and rows of the kinds it lists alone. Indexed Jobs only where torchdeck made
        them: a batch Job is training only when it says so."""
        ours: list[RunJob] = []
        others: list[RunJob] = []
        unread: list[JobStatus] = []
        for key, kind in JOB_KINDS.items():
            whole = not kind.builtin
            for item in self._listed(kind.api, kind.plural, None if whole else MANAGED):
                meta = ObjectMeta.from_api(item)
                mine = meta.labels.get(RUN_LABEL) == meta.name and meta.labels.get(MANAGED_BY) == "torchdeck"
                if not mine and not whole:
                    continue
                try:  # anyone's object: a field of junk makes its row say so, and the others are listed
                    job = RunJob.read(key, item, foreign=not mine)
                except (ValueError, TypeError) as exc:
                    unread.append(unreadable_status(kind, item, self.name, exc))
                    continue
                (ours if mine else others).append(job)
        alone = unread + [
            row
            for listed in LISTED_ALONE
            for item in self._listed(listed.api, listed.api.plural, None)
            for row in [listed_alone_status(listed, item, self.name)]
            if row is not None
        ]
        return ours, others, alone

    def pod_selector(self, run_id: str) -> str:
        """The label selector of a run's pods (the run label, or what its job's release gives them)."""
        return self.runs.selector(run_id)

    def owner(self, run_id: str) -> OwnedBy | None:
        """Which pods are the run's: those its job owns (None: a job without a uid, as no API server
        makes; then the selector alone says)."""
        return self.runs.owner(run_id)

    def pods(self, run_id: str, namespace: str) -> builtins.list[Pod]:
        """The run's pods: those matching its selector that its job owns."""
        return self.watched.pods(namespace, self.pod_selector(run_id), self.owner(run_id))

    def pod_findings(self, namespace: str, pods: Sequence[Pod]) -> builtins.list[Finding]:
        """What is wrong with these pods (``diagnosis.pod_findings``)."""
        return pod_findings(self.client, namespace, pods)

    # -- state ----------------------------------------------------------------------

    def status(self, run_id: str) -> JobStatus:
        try:
            job = self.runs.job(run_id)
        except RunNotFound:  # a run torchdeck stopped: its job was deleted, its last status kept
            kept = self._kept_ended(run_id)
            if kept is None:
                raise
            return kept
        return self._status_for(job)

    def _status_for(self, job: RunJob, pods: Sequence[Pod] | None = None) -> JobStatus:
        """The live job's status, from ``pods`` (its pods, read here where not given)."""
        ns = job.meta.namespace or self.namespace or "default"
        pods = self.pods(job.run_id, ns) if pods is None else pods
        status = self._status_of(job, pods)
        status.found_by_label = self.runs.found_by_label(status.run_id)
        if not status.state.is_terminal:  # a node lost under it: which, since when, the ranks it held
            status.bad_nodes = lost_nodes(self.client, pods, node_ranks(pods), nproc_per_node(job.view))
            if not job.ref:  # another's job: its pods are never deleted from here
                self._release_lost(status, pods)
        read_progress(
            self.client, status, ns, [p for p in pods if p.node not in status.bad_nodes], job, self._node_trouble
        )
        self._priced(job, pods, status)
        if status.state.is_terminal and status.state is not JobState.SUCCEEDED:
            unread: list[str] = []
            status.bad_nodes = bad_nodes(self.client, pods, unread)
            if unread:
                status.warnings.append(
                    f"could not read node {', '.join(unread)} (not this identity's to read): "
                    "whether the run ended on a bad node is not known"
                )
            if self.ledger_dir is not None:
                from ..health import gate_marked

                ran_on = {p.node for p in pods if p.node}
                marked = gate_marked(self.ledger_dir / "check")
                for node in sorted(ran_on & set(marked)):
                    status.bad_nodes[node] = "; ".join(w for w in (status.bad_nodes.get(node), marked[node]) if w)
        if self.ledger_dir is not None and (self.ledger_dir / "triage" / status.run_id).is_dir():
            from ..triage import load

            status.triage = load(self.ledger_dir / "triage" / status.run_id)
        return status

    def _node_trouble(self, name: str) -> str:
        """What the cluster says is wrong with a node now ("" where nothing, or it may not be read)."""
        try:
            return node_trouble(self.client.read_node(name), time.time())
        except ApiError as exc:
            return node_trouble(None) if exc.status == 404 else ""
        except BackendError:
            return ""

    def _release_lost(self, status: JobStatus, pods: Sequence[Pod]) -> None:
        """Delete for good the run's pods evicted off a lost node (its ``cluster.node_loss`` ran out)
        that the node can no longer end itself, where the run said they are safe to delete so (the
        annotation ``cluster.node_loss`` renders): the operator makes them again on a live node now.
        Kueue's recovery does the same a minute after, where it runs; nothing else does at all, and a
        pod on a dead kubelet stays Terminating. Said in the node's line; a refusal is a warning."""
        for pod in pods:
            why = status.bad_nodes.get(pod.node or "")
            if why is None or pod.meta.deleting is None or pod.meta.annotations.get(FORCE_DELETE_ANNOTATION) != "true":
                continue
            try:
                down = lost_node_down(self.client.read_node(pod.node or ""))
            except ApiError as exc:
                down = exc.status == 404
            if not down:
                continue
            body: dict[str, object] = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
            if pod.meta.uid:  # this pod, not one made again under its name meanwhile
                body["preconditions"] = {"uid": pod.meta.uid}
            try:
                self.client.request("DELETE", api_path("Pod", pod.meta.namespace, pod.name), body=body)
            except ApiError as exc:
                if exc.status not in (404, 409):  # gone already, or made again under the same name
                    status.warnings.append(
                        f"could not delete pod {pod.name} off lost node {pod.node} for good ({exc.status}: "
                        "not this identity's to delete): it stays Terminating until Kueue's recovery, or a person, deletes it"
                    )
                continue
            except BackendError:
                continue
            status.bad_nodes[pod.node or ""] = (
                f"{why}; torchdeck deleted pod {pod.name} for good (the node cannot end it; cluster.node_loss "
                "allows it), and its operator makes it again on a live node"
            )

    def triage(self, run_id: str, wait_s: float = 5.0) -> Triage:
        """Where each rank is, from what its probe said in its pod's log (in pods nobody can ask: a
        rank's probe dumps by itself once its main thread has stayed on one line for
        ``POD_STUCK_AFTER_S``); the verdict is kept in the state folder for ``status``."""
        from .. import triage

        status = self.status(run_id)
        triage.require_running(status.run_id, status.state)
        job = self.runs.job(status.run_id)
        if job.ref:  # another's job: read-only (a run found by its label may be asked: triage changes nothing)
            self.runs.require_made(job.run_id, False, "triage")
        name, ns = job.name, job.namespace
        nproc = nproc_per_node(job.view)
        pods = [p for p in self.pods(name, ns) if has_started(p)]
        pod_of = {rank: pod for pod, rank in node_ranks(pods).items()}
        node_of = {p.name: p.node or "?" for p in pods}
        reader = text_reader(job)
        dumps: dict[int, object] = {}
        for node, raw in self._pod_lines(name, ns):
            stream: int | None = None
            if reader is not None:  # the user's code: torchrun's (or mpirun's) tag says which rank wrote it
                stream, raw, _ = reader.read(node, raw)
            elif node < 0:
                continue  # a launcher's lines without a reader of their tags: no rank to key them by
            said = triage_line(raw.decode(errors="replace"))
            if said is None:
                continue
            claimed = said.get("rank")
            if stream is None:
                stream = claimed if isinstance(claimed, int) and not isinstance(claimed, bool) else None
            if node >= 0 and nproc == 1:
                stream = node
            own = range(status.world_size) if node < 0 else range(node * nproc, (node + 1) * nproc)
            if stream is not None and stream in own:  # the pod's own ranks (the launcher's: every rank), no other
                dumps[stream] = said  # the newest a rank said
        if not dumps:
            raise BackendError(
                f"no rank of {status.run_id} has said where it is: in pods each rank's probe says so in its "
                f"log once its main thread has stayed on one line for {POD_STUCK_AFTER_S} s",
                "ask again after that; an image without torchdeck's probe (an older bundle) never says",
            )

        def where(rank: int, dump: object) -> str:
            pod = pod_of.get(rank // max(nproc, 1), "?")
            return f"pod {pod} on node {node_of.get(pod, '?')}"

        verdict = triage.verdict(name, status.world_size, dumps, f"the pods' logs in {ns}", where)
        if self.ledger_dir is not None:
            triage.save(self.ledger_dir / "triage" / name, verdict)
        return verdict

    def run_spec(self, run_id: str) -> JobSpec:
        """The spec the run was submitted with: for a run torchdeck recorded making, the copy kept
        in the state folder then (code folder included); else the job's annotation (a job made by an
        older torchdeck, or imported: what the job object itself says). Where a recorded run's job
        is gone (stopped runs are deleted), the kept copy still answers."""
        made = self.runs.made(run_id)
        if made is not None:
            kept = self._kept_spec(made.run_id)
            if kept is not None:
                return kept
        try:
            job = self.runs.job(run_id)
        except RunNotFound:
            kept = self._kept_spec(run_id) if made is not None else None
            if kept is None:
                raise
            return kept
        return spec_of(job) or self.model_file_of(run_id)[0]

    def _kept_spec(self, run_id: str) -> JobSpec | None:
        if self.ledger_dir is None:
            return None
        from ..files import read_bytes
        from ..names import check_run_id

        try:
            path = self.ledger_dir / "specs" / f"{check_run_id(run_id)}.json"
            return spec_from_dict(json.loads(read_bytes(path, 1 << 20)), str(path))
        except (OSError, ValueError, SpecError):
            return None

    def _keep_spec(self, run_id: str, spec: JobSpec) -> None:
        """A submitted run's spec, in the state folder: what ``resume`` reads once its job is gone."""
        if self.ledger_dir is None:
            return
        from ..files import write_atomically

        with contextlib.suppress(OSError):
            (self.ledger_dir / "specs").mkdir(parents=True, exist_ok=True)
            write_atomically(self.ledger_dir / "specs" / f"{run_id}.json", json.dumps(spec.to_dict()))

    def resume_spec(self, run_id: str, avoid_nodes: Sequence[str] = (), trust_label: bool = False) -> JobSpec:
        """The spec that continues an ended run: its own (same name, so the same checkpoint folder
        on the shared volume, where the trainer resumes from the newest snapshot), naming the run
        it resumes, kept off ``avoid_nodes`` and every node the run already avoided. Its code is
        packed from the folder the run was submitted from (the record says which); a run found by
        its label alone is resumed only with ``trust_label``, and never with code from a folder
        nobody recorded."""
        try:
            status: JobStatus | None = self.status(run_id)
        except RunNotFound:
            status = None  # stopped (its job deleted): its spec was kept when it was submitted
        if status is not None and not status.state.is_terminal:
            raise BackendError(f"{status.run_id} is still running", f"`torchdeck stop {status.run_id}` first")
        name = status.run_id if status is not None else self.runs.recorded_id(run_id)
        self.runs.require_made(name, trust_label, "resume")
        made = self.runs.made(name)
        if made is None and status is None:
            raise RunNotFound(f"no run {run_id!r} on this cluster, and no record of one", "torchdeck jobs lists them")
        spec = self.run_spec(name)
        if not spec.cluster.pvc:
            raise BackendError(
                f"{name} kept its checkpoints in its pods' own folders (no cluster.pvc): they went with its pods",
                "train it again from the start, with a shared volume (cluster.pvc) to resume from next time",
            )
        if not spec.builtin:
            spec = dataclasses.replace(
                spec, entrypoint=dataclasses.replace(spec.entrypoint, code=self._code_dir(name, made))
            )
        self._require_not_resumed(name)
        avoid = sorted(set(spec.cluster.avoid_nodes) | set(avoid_nodes))
        resumed = dataclasses.replace(spec, resumes=name, cluster=dataclasses.replace(spec.cluster, avoid_nodes=avoid))
        return spec_from_dict(resumed.to_dict(), "--avoid-node")  # every field checked again: a node's name too

    @staticmethod
    def _code_dir(name: str, made: MadeRun | None) -> str:
        """The folder a run of the user's code was packed from, as recorded at submit; never a guess."""
        if made is None or not made.code_dir:
            raise BackendError(
                f"{name} runs your code, and torchdeck has no record here of the folder it was packed from",
                "train it again from that folder with the same name (torchdeck train SPEC): it resumes from "
                "the newest checkpoint on the claim",
            )
        if not Path(made.code_dir).is_dir():
            raise BackendError(
                f"{name} was packed from {made.code_dir}, which is no longer a folder",
                "train it again from the code's folder with the same name: it resumes from the newest checkpoint",
            )
        return made.code_dir

    def _require_not_resumed(self, name: str) -> None:
        """Refuse a second resume of ``name`` while a run torchdeck made to resume it goes on (a job
        merely labelled as resuming it, that no record here vouches for, does not hold it up)."""
        records = self.records.on(self.client.server)
        for job in self._list_jobs(f"{RESUMES_LABEL}={name}"):
            later = records.get(job.name)
            if later is None or later.uid != job.meta.uid:
                continue
            if not self._status_of(job, []).state.is_terminal:
                raise BackendError(
                    f"{name} is being resumed already, as {later.run_id}", f"`torchdeck monitor {later.run_id}`"
                )

    def _priced(self, job: RunJob, pods: Sequence[Pod], status: JobStatus) -> None:
        """The run's cost so far (kept on the job once it has ended), and its budget's stop."""
        kept = read_annotation(job.obj, COST_ANNOTATION)
        if kept is not None and status.state.is_terminal:
            try:
                status.cost = RunCost.from_dict(kept)
                return
            except (ValueError, KeyError, TypeError):
                pass  # not one torchdeck wrote: priced again from the pods
        spec = spec_of(job)
        ended = status.finished_at if status.state.is_terminal else None
        uses = node_uses(
            pods, self.node_book.nodes(self.client), ended or (time.time() if status.state.is_terminal else None)
        )
        book = PriceBook(spec.node_price_per_hour if spec else None, self.node_price_per_hour, spot=self.spot_price)
        status.cost = price_run(uses, book, spec.budget if spec else None, running=not status.state.is_terminal)
        path = job.path
        if status.found_by_label:  # not torchdeck's to write to or stop: priced, and said
            if not status.state.is_terminal and (status.cost.share or 0.0) >= 1.0:
                status.warnings.append(
                    "past its budget; torchdeck stops at a budget only the runs it recorded making here"
                )
            return
        if status.state.is_terminal and uses and kept is None:
            with contextlib.suppress(BackendError):  # kept when it can be: read again from the pods while they last
                annotate(self.client, path, {COST_ANNOTATION: status.cost.to_dict()})
        share = status.cost.share
        if not status.state.is_terminal and share is not None and share >= 1.0:
            self._stop_at_budget(job, status)

    def _stop_at_budget(self, job: RunJob, status: JobStatus) -> None:
        """Stop a run whose cost reached its budget: suspend its job (the pods get SIGTERM, the built-in
        trainer writes a snapshot; the job stays, with why), or delete a job that cannot be suspended
        or that Kueue manages (it would admit it again)."""
        cost = status.cost
        assert cost is not None and cost.budget is not None
        spent = cost.amount or 0.0
        status.state, status.reason = JobState.CANCELLED, budget_stop_words(cost.budget, spent)
        status.cost = dataclasses.replace(cost, running=False)
        patch = JOB_KINDS[job.key].suspend_patch()
        if patch is None or QUEUE_LABEL in job.meta.labels:
            self._delete_run(job)  # the very job priced, not whatever its name resolves to now
            status.reason += "; its job was deleted"
            return
        stopped = {"budget": cost.budget, "spent": round(spent, 6), "at": time.time()}
        annotate(self.client, job.path, {STOPPED_ANNOTATION: stopped, COST_ANNOTATION: status.cost.to_dict()}, patch)
        status.hint = (
            f"raise budget and unsuspend the job to go on from its snapshot, or `torchdeck stop {status.run_id}`"
        )

    def _status_of(self, job: RunJob, pods: Sequence[Pod], read_queue: bool = True) -> JobStatus:
        """The job's state from its object and ``pods``; where it waits in a queue, Kueue's word
        (``read_queue``; else the queue's name alone, and queued while it is held suspended)."""
        key, obj, meta, name, view = job.key, job.obj, job.meta, job.name, job.view
        st = mapping(obj.get("status"))
        state, reason = job_state(job.kind, view, pods)
        queue = meta.labels.get(QUEUE_LABEL)
        wait = None
        if queue and not state.is_terminal:
            wait = queue_wait(self.client, obj, queue) if read_queue else QueueWait(queue)
        elif queue:  # ended: the queue it went through, by name (Kueue keeps nothing more of it to read)
            wait = QueueWait(queue)
        if wait is not None and not state.is_terminal and suspended(obj):  # Kueue holds it: it waits, nothing runs
            state, reason = JobState.QUEUED, wait_words(wait)
        elif wait is not None and wait.outside and not reason:  # a queue's label, and no Kueue behind it
            reason = wait.reason
        stopped = read_annotation(obj, STOPPED_ANNOTATION)
        if stopped is not None and suspended(obj):  # torchdeck suspended it at its budget
            state, reason = (
                JobState.CANCELLED,
                budget_stop_words(number(stopped.get("budget")) or 0.0, number(stopped.get("spent")) or 0.0),
            )
        findings = [] if state.is_terminal or wait is not None else self.pod_findings(job.namespace, pods)
        limit = view.run_policy.get("backoffLimit")
        findings += job_findings(name, view.status.conditions, limit if isinstance(limit, int) else None)
        if findings and not reason:
            reason = str(findings[0].where) + ": " + findings[0].problem
        trainer = st.get("trainerStatus")  # a TrainJob's alone
        return JobStatus(
            run_id=job.run_id,
            name=meta.labels.get(JOB_LABEL, name),
            backend=self.name,
            state=state,
            world_size=world_size(job.kind, view),
            submitted_at=meta.created or 0.0,
            finished_at=timestamp(view.status.completion_time),
            reason=reason,
            hint=findings[0].fix if findings else "",
            restarts=sum(cs.restarts for p in pods for cs in p.containers),
            location=f"{job.namespace}/{JOB_KINDS[key].kind}",
            namespace=job.namespace,
            kind=JOB_KINDS[key].kind,
            made_by=made_by(meta) if job.ref else "",
            queue=wait,
            trainer_status=dict(trainer) if isinstance(trainer, Mapping) else None,
        )

    def list(self) -> list[JobStatus]:
        """Every training job this context may list: torchdeck's runs (a row whose job torchdeck
        has no record of making here, or whose uid is not the recorded one, says it was found by
        label), then every other job of the kinds it runs or lists (``_fleet``), read-only, under
        its reference: no log, Workload or pod of theirs is read for their rows."""
        jobs, others, alone = self._fleet()
        pods = self._pods_by_run({job.namespace for job in jobs})
        records = self.records.on(self.client.server) if jobs else {}
        seen = Counter(job.name for job in jobs)
        out = []
        reads = 0  # the runs whose logs this listing read for their rows
        for job in jobs:
            name, uid = job.name, job.meta.uid
            made = records.get(name)
            ours = made is not None and bool(uid) and made.uid == uid
            runs = self.runs
            if ours:
                runs.unrecorded.discard(name)
                runs.learn(job)
            elif made is None and seen[name] == 1 and name not in runs.kinds:  # a decoy teaches nothing
                runs.unrecorded.add(name)
                runs.learn(job)
            elif made is None and seen[name] > 1 and name in runs.unrecorded:  # which one is meant is not known
                runs.kinds.pop(name, None)
                runs.uids.pop(name, None)
            status = self._status_of(job, [])
            status.found_by_label = not ours
            owned = runs.owners.get(name)
            if owned is None or owned.uid != uid:
                owned = OwnedBy(self.client, job.namespace, uid)
            run_pods = [p for p in pods.get(name, []) if not owned.uid or owned(p)]
            self._priced(job, run_pods, status)
            reads += row_figures(self.client, job, status, run_pods, reads < ROW_READS)
            if not status.state.is_terminal:  # a node lost under it (read only where its pods show it)
                status.bad_nodes = lost_nodes(self.client, run_pods, node_ranks(run_pods), nproc_per_node(job.view))
                self._release_lost(status, run_pods)
            out.append(status)
        for job in others:
            status = self._status_of(job, [], read_queue=False)
            status.found_by_label = True  # not torchdeck's: nothing is written to it
            out.append(status)
        return sorted(out + alone, key=lambda s: s.submitted_at, reverse=True)

    def nodes_view(self, early: Callable[[NodesView], None] | None = None) -> NodesView:
        """Every node of the cluster now (``board.read_nodes_view``), with the health gate's marks."""
        from ..health import gate_marked

        marked = gate_marked(self.ledger_dir / "check") if self.ledger_dir is not None else {}
        return read_nodes_view(self.client, marked, self.namespace, early)

    def queues_view(self) -> QueuesView:
        """Every queue this identity may read (``board.read_queues_view``); the workloads of the
        runs torchdeck made here are the user's."""
        ours = {made.uid: run_id for run_id, made in self.records.on(self.client.server).items() if made.uid}
        return read_queues_view(self.client, ours, self.namespace)

    def unseen(self) -> builtins.list[str]:
        return sorted(set(self._unseen.values()))

    def _pods_by_run(self, namespaces: set[str]) -> dict[str, builtins.list[Pod]]:
        """Every torchdeck pod of these namespaces, by run (one request each), to price a listing."""
        found: dict[str, builtins.list[Pod]] = {}
        for namespace in sorted(namespaces):
            try:
                answer = self.client.request("GET", api_path("Pod", namespace), query={"labelSelector": RUN_LABEL})
            except BackendError:
                continue  # not ours to list: those runs' costs say their pods are not known
            for pod in (Pod.from_api(p) for p in items_of(answer)):
                found.setdefault(pod.labels.get(RUN_LABEL, ""), []).append(pod)
        return found

    def cancel(self, run_id: str, trust_label: bool = False) -> JobStatus:
        """Stop the run: delete its job (its pods go with it). A run found by its label alone is
        stopped only with ``trust_label`` (the user said it is theirs)."""
        job = self.runs.job(run_id)
        self.runs.require_made(job.run_id, trust_label, "stop")
        status = self._keep_ended(job)
        self._delete_run(job)
        status.state, status.reason = JobState.CANCELLED, "stopped by the user; its pods are being deleted"
        return status

    def discard(self, run_id: str, trust_label: bool = False) -> builtins.list[str]:
        job = self.runs.job(run_id)
        self.runs.require_made(job.run_id, trust_label, "stop")
        self._keep_ended(job)
        return self._delete_run(job)

    def _keep_ended(self, job: RunJob) -> JobStatus:
        """The run's last status and its digest (its curves, what ``compare`` draws), read before its job
        and pods go and kept in the state folder, so that ``status``, ``compare`` and a resumed run's
        lineage still find it; its status, as it ends there (stopped now, unless it had ended)."""
        pods = self.pods(job.name, job.meta.namespace or self.namespace or "default")
        status = self._status_for(job, pods)
        if not status.state.is_terminal:
            status.state, status.finished_at = JobState.CANCELLED, time.time()
            status.reason = f"stopped by the user at {time.strftime('%H:%M:%S', time.localtime(status.finished_at))}"
        status.coming_back = []  # nothing of it comes back now; the nodes it lost stay named (resume --avoid-node)
        made = self.runs.made(job.name)
        path = self.records.ended_path(self.client.server, job.name) if made is not None else None
        if path is None or self.ledger_dir is None:
            return status
        from ...trainer.metrics import strict_json
        from ..files import write_atomically
        from ..run_digest import DigestStore, fold_run

        if len(pods) <= PODS_READ:  # a stop waits for no thousand logs
            with contextlib.suppress(BackendError, OSError):
                digest = fold_run(self, job.name)
                digest.complete = True
                store = DigestStore(self.ledger_dir)
                store.write(store.path(self.scope, status), digest)
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomically(path, strict_json(status.to_dict()))
        return status

    def _kept_ended(self, run_id: str) -> JobStatus | None:
        """The last status kept of a run torchdeck made and stopped (its job deleted)."""
        made = self.runs.made(run_id)
        path = self.records.ended_path(self.client.server, run_id) if made is not None else None
        if made is None or path is None:
            return None
        from ..run_files import read_kept_status

        return read_kept_status(path, run_id, self.name, f"{made.namespace}/{JOB_KINDS[made.kind].kind}")

    def adopt(
        self,
        key: JobKindName,
        name: str,
        namespace: str | None = None,
        keep: Callable[[JobSpec], None] = lambda spec: None,
    ) -> tuple[JobSpec, builtins.list[str], str]:
        """Follow a job made elsewhere (``kubectl apply`` of an operator's example) as a run of its own
        name: read it as ``torchdeck import`` reads a manifest, ``keep`` the spec read (its file), then
        label the job as torchdeck labels its own, with its pods' selector and that spec.
        Nothing changes where it cannot be read or its name is another run's."""
        info = JOB_KINDS[key]
        ns = namespace or self.namespace or self.client.context_namespace or "default"
        path = api_path(JOB_KINDS[key].api, ns, name)
        try:
            obj = self.client.request("GET", path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            raise RunNotFound(
                f"no {info.kind} {name} in namespace {ns} of this cluster",
                f"kubectl get {info.plural} -n {ns} lists them; --namespace picks another",
            ) from None
        labels = ObjectMeta.from_api(obj).labels
        if labels.get(RUN_LABEL):
            raise BackendError(
                f"{info.kind} {ns}/{name} is torchdeck's run {labels[RUN_LABEL]} already",
                f"torchdeck --backend kubernetes status {labels[RUN_LABEL]}",
            )
        found = import_job(obj, f"{info.kind} {ns}/{name}")
        if self._run_taken(name):
            raise BackendError(
                f"another torchdeck run in this cluster is called {name} (run ids name runs cluster-wide)",
                "stop or delete that run first: torchdeck --backend kubernetes jobs lists them",
            )
        keep(found.spec)
        notes = {SPEC_ANNOTATION: kept_spec(found.spec), PODS_ANNOTATION: f"{JOB_KINDS[key].pod_label}={name}"}
        if not found.spec.builtin:  # the user's code: its ranks' lines are read as torchdeck's own
            notes[PROGRAM_ANNOTATION] = found.spec.program
        ours = run_labels(name, found.spec.name)
        self.client.request("PATCH", path, body={"metadata": {"labels": ours, "annotations": notes}})
        # the user asked to follow it: torchdeck records it as a run of its own from now on, by its uid
        self.records.add(made_now(name, self.client.server, self.client.current_context(), ns, key, obj, None))
        self.runs.unrecorded.discard(name)
        self._note(path)
        self.runs.kinds[name] = (key, ns)
        self.runs.selectors[name] = notes[PODS_ANNOTATION]
        return found.spec, found.notes, name

    def _delete_run(self, job: RunJob) -> builtins.list[str]:
        """Delete the job object (its controller's objects and pods go with it, by their owner) and
        what torchdeck made beside it; what was deleted, as ``kind/name``."""
        key, name, ns = job.key, job.name, job.namespace
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        self.client.request("DELETE", api_path(JOB_KINDS[key].api, ns, name), body=body)
        self._forget(api_path(JOB_KINDS[key].api, ns, name))
        deleted = [f"{JOB_KINDS[key].kind}/{name}"]
        for kind in JOB_KINDS[key].beside:  # the plain Job's service, the ElasticJob's etcd
            selector = {"labelSelector": f"{RUN_LABEL}={name}"}
            try:
                made = [
                    ObjectMeta.from_api(o).name
                    for o in items_of(self.client.request("GET", api_path(kind, ns), query=selector))
                ]
            except ApiError as exc:
                if exc.status != 403:
                    raise
                self._unseen[f"beside {kind}"] = f"may not list {kind}s in {ns}: those made beside a run are left"
                continue
            for item in made:
                if item not in (name, f"{name}-etcd"):  # the names its template gives them
                    continue
                self.client.request("DELETE", api_path(kind, ns, item), body=body)
                self._forget(api_path(kind, ns, item))
                deleted.append(f"{kind}/{item}")
        return deleted

    # -- jobs around training (task jobs: tasks.py) ----------------------------------

    def prepare_data(self, spec: JobSpec, progress: Progress = silent, source: str | None = None) -> DataReady:
        return DataReady.from_tool(self.tasks.run(spec, "data-prep", None, progress, source))

    def copy_model(self, spec: JobSpec, model_file: str, target: str, on_wait: Progress = silent) -> None:
        """The model-copy job: the model file on the shared volume to ``target`` (s3://), so it can
        leave the cluster; the job runs with the spec's service account (its IRSA role)."""
        self.tasks.run(spec, "model-copy", model_file, on_wait, target)

    def fetch_model(
        self,
        run_id: str,
        via: Callable[[JobSpec], str],
        progress: Progress = silent,
        location: str | None = None,
    ) -> str:
        """A model on the cluster's volume leaves through S3: the model-copy job puts it under
        ``via(spec)/RUN/model.pt``; one saved to S3 already is fetched from there."""
        spec, saved = self.model_file_of(run_id)
        name = self.runs.job(run_id).name
        if name in self.runs.unrecorded:  # its job's image, account and paths would run the copy, and you load the file
            raise FoundByLabel(
                f"{name} was {FOUND_BY_LABEL}: its model is not copied on a label's word",
                f"torchdeck import {self.runs.kinds[name][0]}/{name} first if it is yours, or copy it with kubectl",
            )
        location = location or saved
        if S3Url.is_s3(location):
            return location
        try:
            target = str(S3Url.parse(via(spec)).join(run_id, "model.pt"))
        except ValueError as exc:
            raise BackendError(f"--via: {exc}", "e.g. --via s3://my-bucket/models") from None
        progress(f"{location} is on the cluster's volume: copying it to {target} with a job")
        self.copy_model(spec, location, target, on_wait=progress)
        return target

    def model_file_of(self, run_id: str) -> tuple[JobSpec, str]:
        """The spec read back from the job object (image, namespace, volume,
        service account, paths), and the model file its trainer writes."""
        job = self.runs.job(run_id)
        if job.ref:  # its image, account and paths would run the copy or the test, in its namespace
            self.runs.require_made(job.run_id, False, "copy the model of")
        obj = job.obj
        pod = PodTemplate.read_spec(first_pod_spec(obj.get("spec")))

        def arg(flag: str) -> str | None:
            return argument(job.view, flag)

        container = pod.container(())
        trainer = at(obj, ("spec", "trainer", "image"))  # a TrainJob's own image, where its pods name none
        image = container.image or (trainer if isinstance(trainer, str) else None)
        claims = [v.claim for v in map(Volume.read, walk_volumes(obj)) if v.claim]
        gpus = container.limits.get("nvidia.com/gpu")
        found = {"name": job.meta.labels.get(JOB_LABEL), "device": arg(trainer_options.DEVICE.flag)}
        cluster = {"data_dir": arg(trainer_options.DATA_DIR.flag), "pvc": claims[0] if claims else None}
        spec_data = {
            **{k: v for k, v in found.items() if v},  # what the job does not say: the spec's defaults
            "image": image,
            "namespace": job.namespace,
            "resources": {"gpus": int(str(gpus)) if gpus else 0},
            "cluster": {
                **{k: v for k, v in cluster.items() if v},
                "service_account": pod.service_account,
                "node_selector": dict(pod.node_selector),
            },
        }
        spec = spec_from_dict(spec_data, f"{JOB_KINDS[job.key].kind}/{job.name}")
        checkpoint_dir = arg(trainer_options.CHECKPOINT_DIR.flag)
        model_file = arg(trainer_options.MODEL_FILE.flag) or (f"{checkpoint_dir}/model.pt" if checkpoint_dir else None)
        if model_file is None:
            raise BackendError(f"{run_id}: the job does not say where its model goes", "pass --model-file")
        return spec, model_file

    def test_model(self, spec: JobSpec, model_file: str | None = None, progress: Progress = silent) -> TestResult:
        return as_test_result(self.tasks.run(spec, "model-test", model_file, progress))

    # -- pods, logs and metrics -----------------------------------------------------

    def _pod_lines(self, name: str, ns: str) -> Iterator[tuple[int, bytes]]:
        """Every line the run's own pods hold now, with the node rank of the pod that wrote it."""
        follower = PodLogFollower(self.client, self.pod_selector(name), name, ns, follow=False, owned=self.owner(name))
        follower.start()
        try:
            while True:
                batch, done = follower.take(0.2)
                for node, _attempt, raw in batch:
                    yield node, raw
                if done:
                    return
        finally:
            follower.stop()

    def logs(
        self, run_id: str, rank: int | None = None, follow: bool = False, poll_s: float = 0.2
    ) -> Iterator[builtins.list[LogLine]]:
        job = self.runs.job(run_id)
        name, ns = job.name, job.namespace
        nproc = nproc_per_node(job.view)
        follower = PodLogFollower(
            self.client, self.pod_selector(job.run_id), name, ns, follow=follow, owned=self.owner(job.run_id)
        )
        follower.start()
        reader = text_reader(job)
        try:
            while True:
                batch, done = follower.take(poll_s)
                lines = log_lines(batch, nproc, rank, reader)[1]
                if lines or follow:
                    yield lines
                if done:
                    return
        finally:
            follower.stop()

    logs_carry_metrics = True

    async def follow(self, run_id: str) -> AsyncIterator[tuple[builtins.list[MetricEvent], builtins.list[LogLine]]]:
        """Every pod's log once, as metric events and log lines together."""
        job = await asyncio.to_thread(self.runs.job, run_id)
        name, ns = job.name, job.namespace
        nproc = nproc_per_node(job.view)
        follower = PodLogFollower(
            self.client, self.pod_selector(job.run_id), name, ns, follow=True, owned=self.owner(job.run_id)
        )
        follower.start()
        reader = text_reader(job)
        try:
            while True:
                batch, done = await asyncio.to_thread(follower.take, 0.1)
                if batch:
                    yield log_lines(batch, nproc, None, reader)
                if done:
                    return
        finally:
            follower.stop()

    async def metrics(
        self, run_id: str, follow: bool = True, poll_s: float = 0.1
    ) -> AsyncIterator[builtins.list[MetricEvent]]:
        job = await asyncio.to_thread(self.runs.job, run_id)
        name, ns = job.name, job.namespace
        follower = PodLogFollower(
            self.client, self.pod_selector(job.run_id), name, ns, follow=follow, owned=self.owner(job.run_id)
        )
        follower.start()
        reader = text_reader(job)
        nproc = nproc_per_node(job.view)
        try:
            while True:
                batch, done = await asyncio.to_thread(follower.take, poll_s)
                events = (
                    log_lines(batch, nproc, None, reader)[0]
                    if reader
                    else parse_metric_lines([raw for _, _, raw in batch])
                )
                if events:
                    yield events
                if done:
                    return
        finally:
            follower.stop()

    def node_metrics(self, run_id: str) -> builtins.list[NodeMetrics]:
        """Node CPU and memory from metrics-server, which measures every 15 s:
        asked again at most every NODE_METRICS_TTL_S."""
        cached = self._node_cache.get(run_id)
        if cached and time.monotonic() - cached[0] < NODE_METRICS_TTL_S:
            return cached[1]
        job = self.runs.job(run_id)
        result = measure_nodes(self.client, self.pods(job.run_id, job.namespace))
        self._node_cache[run_id] = (time.monotonic(), result)
        return result
