"""The training job kinds, each one object (``JOB_KINDS``) that carries its facts and its behaviour:
where the API server keeps it (group, version, plural: the client's paths come from here), its
operator and how to install it, the operator releases torchdeck renders it for (``targets``: the
real cluster's from manifests/versions.toml), its template and its part of the render context,
where its replicas and world size live, how its conditions read as a ``JobState``, how a manifest
of it is imported, the spec fields it cannot carry out, its Kueue integration, and whether
``torchdeck import KIND/NAME`` follows it live. The renderer, the client's paths, the preflight,
the state readers, the importer and the queue code all ask these objects; nothing else names a
kind (tests/unit/test_kind_objects.py holds that). Adding a kind is one object here and its
template in manifests/. (lightkube's resource classes.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..base import JobState
from ..errors import BackendError, SpecError
from ..spec import KINDS, JobKindName, JobSpec
from .client import ApiKind
from .crds import Json, Target, operator_releases, schema_of, served_versions, spec_fields
from .kind_objects import JobObject, PodTemplate, at, whole
from .objects import Pod
from .render_context import KindInputs, MpiRole, RenderContext, Resources

MPI_SSH_DIR = "/home/trainer/.ssh"
"""Where the MPI Operator mounts the SSH keys: the home of the images' uid-1000
user (the operator's default, /root/.ssh, is not that user's)."""
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
RDZV_PORT = 29400
OWN_ROUND_STORES: dict[str, object] = {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"}
"""For a run on torchrun's c10d rendezvous (elastic, or an indexed Job's): each round's ranks get a
store of that round's own. With the store the agents share since the first round (torch's default),
a node that joins a later round (a lost node's pod made again, an elastic run growing back) waits
for the address of a store the first round's agents never write again, and both time out after a
minute (seen with torch 2.13 on the real Training Operator)."""
# Images torchdeck itself chooses are pinned by digest: a tag can be moved to other bytes.
# The etcd digest is the one public manifests pin v3.5.17 to; it was not resolved against quay.io
# from the machine that wrote this (no registry access there): `crane digest` it when bumping.
ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.17@sha256:a055da833a7c013b836ed0822e8ec1f99b059658be255ad8d0fcd31b635ae3d6"
MPI_LAUNCHER_RESOURCES: Resources = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}
"""An MPIJob's launcher pod (mpirun only): what it asks besides the workers (a queue's quota counts it)."""
MPI_SSHD = ["/usr/sbin/sshd", "-De", "-f", "/etc/ssh/sshd_config.torchdeck"]
"""An MPIJob worker's command: the SSH server of ``torchdeck image build --mpi``, run by the image's
user (docker/mpi/sshd_config)."""
TORCHRUN = ["python", "-m", "torch.distributed.run"]


@dataclass(frozen=True)
class ImportShape:
    """What a kind's manifest says of a job's shape: its pod templates, its size and what else
    carries over to the spec (``torchdeck import``)."""

    template: PodTemplate | None
    """The training pods' template."""
    program_template: PodTemplate | None
    """The template whose container says what runs (an MPIJob's launcher; else the same)."""
    nodes: int
    cluster: dict[str, object] = field(default_factory=dict)
    """``cluster.*`` fields, by name."""
    nproc_per_node: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class JobKind:
    """One training job kind: what it is on the API server, what it needs there, and how torchdeck
    renders, reads and imports it. The methods here are what the Kubeflow-shaped kinds share; a kind
    that differs overrides them."""

    key: JobKindName
    """torchdeck's name (``cluster.kind``)."""
    group: str
    version: str
    plural: str
    kind: str
    operator: str
    """What to install when its CRD is missing."""
    install: str
    warning: str = ""
    """Said with every render of it."""
    pod_label: str = ""
    """The label its controller puts on the job's pods, with the job's name (seen on the real Training
    Operator v1.9.4, MPI Operator v0.8.2, Kubernetes 1.34 and JobSet v0.12.0); empty: none known."""
    operator_name: str = ""
    """What its controller says it is on the pods (``training.kubeflow.org/operator-name``): kinds
    whose pods bear the same ``pod_label`` are told apart by it where the pod's controller is not
    the job (an MPIJob's launcher is a batch Job's pod)."""
    suspend_at: tuple[str, ...] = ()
    """Where the job keeps its suspend flag (empty: it cannot be suspended)."""
    queued: bool = True
    """Whether Kueue can queue it."""
    beside: tuple[str, ...] = ()
    """The kinds torchdeck makes beside the job for it (its template's other objects), which
    ``stop`` deletes with it: nothing else is listed, so a namespace's user needs no other rights."""
    targets: tuple[Target, ...] = ()
    """The operator releases torchdeck renders it for, oldest first: the last is what ``render``
    targets by default (empty: a built-in kind)."""
    import_crds: Mapping[str, str] = field(default_factory=dict)
    """The operators' CRDs (manifests/crds/) for the API versions a manifest from elsewhere may use,
    by version; besides its targets' own."""
    importable: bool = True
    """Whether ``torchdeck import FILE`` reads a manifest of it."""
    live: bool = False
    """Whether ``torchdeck import KIND/NAME`` reads one from a cluster."""
    container: str = "trainer"
    """The training container's name (an operator finds its container by name)."""
    replicas_at: str = ""
    """The spec field that holds its replica specs, by role (empty: none)."""
    elastic: bool = True
    """Whether it takes elastic bounds (cluster.min_nodes/max_nodes)."""
    init_containers: bool = True
    """Whether its pods take init containers of torchdeck's (the code bundle's)."""
    entrypoint_is_torchrun: bool = False
    """Whether its images' entrypoint is torchrun (a container without a command runs it)."""
    extra_requests: Mapping[str, str] = field(default_factory=dict)
    """What its pods besides the ranks' ask (an MPIJob's launcher): a queue's quota counts it too."""
    article: str = "a"
    missing_hint: str = ""
    """What to do where the cluster serves none of its targets' versions (empty: install one)."""

    @property
    def api(self) -> ApiKind:
        """Where the API server keeps it: ``client.api_path`` takes this."""
        return ApiKind.of_group(self.group, self.version, self.plural)

    @property
    def builtin(self) -> bool:
        """A kind Kubernetes serves itself (no CRD, no operator)."""
        return self.group == "batch"

    @property
    def kueue_framework(self) -> str:
        """Kueue's name of the kind in its configuration's ``integrations.frameworks``."""
        return f"{self.group}/{self.kind.lower()}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def template(self) -> str:
        """Its template in manifests/."""
        return f"{self.key}.yaml.j2"

    @property
    def latest(self) -> Target | None:
        """The newest release torchdeck renders it for (None: a built-in kind)."""
        return self.targets[-1] if self.targets else None

    @property
    def supported(self) -> str:
        """The releases torchdeck renders it for, in words."""
        return ", ".join(t.release for t in self.targets)

    def named(self, release: str) -> Target:
        """The release ``release`` names (``v2.1.0``, ``2.1.0`` or its full name); BackendError where
        torchdeck renders for no such release of it."""
        for target in self.targets:
            version = target.release.rsplit(" ", 1)[-1]
            if release.strip() in (target.release, version, version.removeprefix("v")):
                return target
        raise BackendError(
            f"torchdeck renders {self.kind} for {self.supported or 'no operator release'}, not {release!r}",
            "name one of those releases (its version, e.g. "
            + (self.latest.release.rsplit(" ", 1)[-1] if self.latest else "-")
            + ")",
        )

    def crd_for_import(self, version: str) -> str | None:
        """The CRD file a manifest of it in API ``version`` is checked against (None: none here)."""
        own = {t.version: t.crd_file for t in self.targets}
        return {**own, **self.import_crds}.get(version)

    def suspend_patch(self) -> dict[str, object] | None:
        """The merge patch that suspends a job of this kind (its pods are deleted, the job kept)."""
        if not self.suspend_at:
            return None
        patch: dict[str, object] = {self.suspend_at[-1]: True}
        for part in reversed(self.suspend_at[:-1]):
            patch = {part: patch}
        return patch

    def is_suspended(self, obj: Json) -> bool:
        """Whether the job is held suspended, where this kind keeps the flag."""
        return bool(at(obj, self.suspend_at)) if self.suspend_at else False

    def view(self, obj: Json) -> JobObject:
        """A job object of this kind, read once."""
        return JobObject.read(obj, self.replicas_at)

    # -- which release of its operator -------------------------------------------------

    def target_for(self, definition: Json) -> Target:
        """The release to render it for, from the CRD object the cluster holds; BackendError where
        the cluster serves no version torchdeck supports."""
        name = str(at(definition, ("metadata", "name")) or self.key)
        served = served_versions(definition)
        candidates = [t for t in self.targets if t.version in served]
        if not candidates:
            raise BackendError(
                f"this cluster's {name} serves {', '.join(served) or 'no version'}; torchdeck renders "
                f"{self.targets[-1].version} ({self.supported})",
                self.missing_hint or f"install {self.supported}",
            )
        return self.pick(name, definition, candidates)

    def pick(self, name: str, definition: Json, candidates: Sequence[Target]) -> Target:
        """Among the releases whose API version the cluster serves, the one it runs."""
        return candidates[-1]

    # -- reading a job of it -------------------------------------------------------------

    def nodes(self, job: JobObject) -> int:
        """Its pods that run ranks (its world size is these times the ranks per pod)."""
        return job.replicas("Worker")

    def state(self, job: JobObject, pods: Sequence[Pod]) -> tuple[JobState, str]:
        """Its conditions mapped onto JobState, with the condition's message (Kubeflow's here)."""
        holding = job.status.holding()
        for kind, state in KUBEFLOW_STATES:
            if kind in holding:
                message = holding[kind].message if state is JobState.FAILED or kind == "Restarting" else ""
                if state is JobState.RUNNING and not any_running(pods) and pods:
                    return JobState.PENDING, message
                return state, message
        return JobState.PENDING, ""

    def pods_carry_run_label(self, job: JobObject) -> bool:
        """Whether its pods carry the run's label (else they are found by their controller's)."""
        return True

    # -- rendering it --------------------------------------------------------------------

    def render(self, ctx: RenderContext, inputs: KindInputs) -> None:
        """Its part of the render context, on top of what every kind shares."""

    def for_target(self, ctx: RenderContext, target: Target | None) -> list[str]:
        """The context for ``target``'s release, and what to say of it (warnings)."""
        ctx.pod_overrides = target.pod_overrides if target else ""
        return []

    def check_fields(self, spec: JobSpec, source: str = "") -> None:
        """Fields it cannot carry out: refused rather than dropped without a word."""
        if not self.elastic and spec.cluster.min_nodes is not None:
            raise SpecError(
                "cluster.min_nodes",
                f"{self.article} {self.kind} has no elastic bounds",
                f"use kind {PYTORCHJOB.key} (or {INDEXED_JOB.key}) for an elastic job, or drop "
                "cluster.min_nodes/max_nodes",
                source,
            )

    # -- importing a manifest of it ------------------------------------------------------

    def read_import(self, job: JobObject) -> ImportShape:
        """What its manifest says of the job's shape."""
        raise NotImplementedError(f"torchdeck does not import a {self.kind}")


KUBEFLOW_STATES = (
    ("Succeeded", JobState.SUCCEEDED),
    ("Failed", JobState.FAILED),
    ("Restarting", JobState.RUNNING),
    ("Running", JobState.RUNNING),
    ("Suspended", JobState.PENDING),
    ("Created", JobState.PENDING),
)


def any_running(pods: Sequence[Pod]) -> bool:
    """Whether any of a job's pods runs."""
    return any(p.phase == "Running" for p in pods)


@dataclass(frozen=True)
class PyTorchJobKind(JobKind):
    """Kubeflow Training Operator v1: Master + Workers, or Workers with an elastic policy."""

    def nodes(self, job: JobObject) -> int:
        return sum(r.replicas for r in job.replica_specs.values())

    def render(self, ctx: RenderContext, inputs: KindInputs) -> None:
        ctx.container = self.container  # the operator finds its container by this name
        # the replica's restartPolicy is the one the operator applies; one in the pod template it
        # overwrites, with a warning event on the job (SetPodTemplateRestartPolicy), seen on a real one
        ctx.pod_restart_policy = None
        nodes = inputs.spec.nodes
        ctx.replica_roles = (
            [("Worker", nodes)] if ctx.elastic else [("Master", 1)] + ([("Worker", nodes - 1)] if nodes > 1 else [])
        )
        if ctx.elastic:  # the operator's elastic policy: torchrun's c10d rendezvous
            ctx.env = [*ctx.env, OWN_ROUND_STORES]

    def read_import(self, job: JobObject) -> ImportShape:
        roles = job.replica_specs
        main = roles.get("Master") or roles.get("Worker")
        template = main.template if main else None
        cluster: dict[str, object] = {"kind": self.key}
        elastic = job.field("elasticPolicy")
        low, high = at(elastic, ("minReplicas",)), at(elastic, ("maxReplicas",))
        if low is not None and high is not None:
            cluster["min_nodes"], cluster["max_nodes"] = low, high
        nproc = job.field("nprocPerNode")
        ranks = whole(nproc, 1) if nproc not in (None, "auto", "gpu", "cpu") else None
        return ImportShape(template, template, sum(r.replicas for r in roles.values()), cluster, ranks)


@dataclass(frozen=True)
class TrainJobKind(JobKind):
    """Kubeflow Trainer v2: a TrainJob against a ClusterTrainingRuntime, whose pods it patches where
    its release takes the patch (``Target.pod_overrides``)."""

    def nodes(self, job: JobObject) -> int:
        return job.count("trainer", "numNodes")

    def state(self, job: JobObject, pods: Sequence[Pod]) -> tuple[JobState, str]:
        holding = job.status.holding()
        if "Complete" in holding:
            return JobState.SUCCEEDED, ""
        if "Failed" in holding:
            return JobState.FAILED, holding["Failed"].message
        return (JobState.RUNNING if any_running(pods) else JobState.PENDING), ""

    def pods_carry_run_label(self, job: JobObject) -> bool:
        return "podSpecOverrides" not in job.spec  # Trainer v2.0 cannot label its pods

    def pick(self, name: str, definition: Json, candidates: Sequence[Target]) -> Target:
        schema = schema_of(definition, candidates[-1].version)
        if schema is None:  # a CRD without a schema keeps whatever it is sent
            return candidates[-1]
        fields = spec_fields(schema)
        for target in reversed(candidates):
            if target.pod_overrides in fields:
                return target
        raise BackendError(
            f"this cluster's {name} has none of {', '.join(TRAINJOB_OVERRIDES)}: torchdeck cannot place "
            "the volumes, /dev/shm, service account and labels in its pods",
            f"install one of {self.supported}",
        )

    def render(self, ctx: RenderContext, inputs: KindInputs) -> None:
        ctx.args = inputs.program  # the runtime's torch policy sets torchrun's node and process counts
        ctx.command = [*TORCHRUN, "--max-restarts", str(inputs.spec.max_restarts)]
        ctx.command += [] if inputs.spec.builtin else ["--tee", "3"]

    def for_target(self, ctx: RenderContext, target: Target | None) -> list[str]:
        super().for_target(ctx, target)
        if ctx.pod_overrides != "podSpecOverrides":
            return []
        release = target.release if target else "Trainer v2.0"
        if ctx.affinity.get("nodeAffinity"):
            raise SpecError(
                "cluster.avoid_nodes",
                f"a {self.kind} for {release} cannot keep pods off nodes: its podSpecOverrides has no affinity",
                f"upgrade Kubeflow Trainer to v2.1 or later, use a {PYTORCHJOB.kind} (cluster.kind), or cordon "
                "the node",
            )
        ctx.affinity = {}  # (its pods carry no run label for a spread to select)
        return [
            f"{self.kind} for {release}: its pods carry the JobSet's labels, not the run's; "
            "torchdeck finds them by the JobSet's name"
        ]


@dataclass(frozen=True)
class MpiJobKind(JobKind):
    """Kubeflow MPI Operator v2: mpirun on a launcher pod starts one torchrun per worker over SSH."""

    def render(self, ctx: RenderContext, inputs: KindInputs) -> None:
        spec, run_id = inputs.spec, inputs.run_id
        endpoint = f"{run_id}-worker-0.{run_id}.{spec.namespace}.svc:{RDZV_PORT}"
        code = (
            []
            if spec.builtin
            else ["-wdir", inputs.code_dir, *[x for e in inputs.user_env for x in ("-x", str(e["name"]))]]
        )
        launch = [
            "-np", str(spec.nodes), "--map-by", "ppr:1:node", "--bind-to", "none", *code,
            *TORCHRUN, "--nnodes", str(spec.nodes), *inputs.torchrun,
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id, *inputs.program,
        ]  # fmt: skip
        rdzv_ports: list[dict[str, object]] = [{"name": "rdzv", "containerPort": RDZV_PORT}]
        ctx.mpi_roles = [
            MpiRole("Launcher", 1, "launcher", ["mpirun"], launch, MPI_LAUNCHER_RESOURCES, [], False),
            MpiRole("Worker", spec.nodes, "worker", MPI_SSHD, [], ctx.resources, rdzv_ports, True),
        ]
        ctx.ssh_auth_mount_path = MPI_SSH_DIR

    def check_fields(self, spec: JobSpec, source: str = "") -> None:
        super().check_fields(spec, source)
        if spec.cluster.restart_policy == "ExitCode":
            raise SpecError(
                "cluster.restart_policy",
                "the MPI Operator takes Never or OnFailure, not ExitCode",
                "set cluster.restart_policy: OnFailure",
                source,
            )

    def read_import(self, job: JobObject) -> ImportShape:
        worker, launcher = job.replica_specs.get("Worker"), job.replica_specs.get("Launcher")
        notes = []
        mount = job.field("sshAuthMountPath")
        if mount:
            notes.append(f"sshAuthMountPath {mount}: torchdeck mounts the keys in {MPI_SSH_DIR}")
        return ImportShape(
            worker.template if worker else None,
            launcher.template if launcher else None,
            job.replicas("Worker"),
            {"kind": self.key},
            notes=notes,
        )


@dataclass(frozen=True)
class IndexedJobKind(JobKind):
    """A plain indexed Job (no operator) and the headless Service that names its pods for the
    rendezvous."""

    def nodes(self, job: JobObject) -> int:
        return job.count("completions")

    def state(self, job: JobObject, pods: Sequence[Pod]) -> tuple[JobState, str]:
        holding = job.status.holding()
        if "Complete" in holding:
            return JobState.SUCCEEDED, ""
        if "Failed" in holding:
            return JobState.FAILED, holding["Failed"].message or holding["Failed"].reason
        return (JobState.RUNNING if job.status.active and any_running(pods) else JobState.PENDING), ""

    def render(self, ctx: RenderContext, inputs: KindInputs) -> None:
        spec, run_id, c = inputs.spec, inputs.run_id, inputs.spec.cluster
        ctx.subdomain = run_id
        ctx.ports = [{"name": "rdzv", "containerPort": RDZV_PORT}]
        nnodes = f"{c.min_nodes}:{c.max_nodes}" if ctx.elastic else str(spec.nodes)
        ctx.env = ctx.env + [
            {"name": "PET_NNODES", "value": nnodes},
            {"name": "PET_RDZV_BACKEND", "value": "c10d"},
            {"name": "PET_RDZV_ENDPOINT", "value": f"{run_id}-0.{run_id}:{RDZV_PORT}"},
            {"name": "PET_RDZV_ID", "value": run_id},
            OWN_ROUND_STORES,
        ]

    def read_import(self, job: JobObject) -> ImportShape:
        notes = []
        if job.field("completionMode") != "Indexed":
            notes.append(f"{self.kind}: not an indexed {self.kind}; torchdeck runs it as one (a pod per node)")
        nodes = whole(job.field("completions") or job.field("parallelism"), 1)
        cluster: dict[str, object] = {"kind": self.key}
        if job.field("backoffLimit") is not None:
            cluster["backoff_limit"] = job.field("backoffLimit")
        template = PodTemplate.read(job.field("template"))
        return ImportShape(template, template, nodes, cluster, notes=notes)


@dataclass(frozen=True)
class ElasticJobKind(JobKind):
    """TorchElastic's ElasticJob, with its own etcd rendezvous (render-only on today's clusters)."""

    def render(self, ctx: RenderContext, inputs: KindInputs) -> None:
        spec, c = inputs.spec, inputs.spec.cluster
        ctx.container = self.container
        ctx.pod_restart_policy = "Never"
        ctx.min_nodes = c.min_nodes if ctx.elastic else spec.nodes
        ctx.max_nodes = c.max_nodes if ctx.elastic else spec.nodes
        ctx.etcd_image = ETCD_IMAGE
        ctx.etcd_labels = {"app.kubernetes.io/name": "torchdeck-etcd", **ctx.selector}

    def check_fields(self, spec: JobSpec, source: str = "") -> None:
        super().check_fields(spec, source)
        if spec.cluster.queue:
            raise SpecError(
                "cluster.queue",
                f"Kueue does not queue an {self.kind} (its controller, pytorch/elastic, was archived in 2023)",
                f"submit a {PYTORCHJOB.key} (cluster.min_nodes/max_nodes make it elastic) or a {TRAINJOB.key} "
                "through the queue",
                source,
            )

    def read_import(self, job: JobObject) -> ImportShape:
        worker = job.replica_specs.get("Worker")
        nodes = job.replicas("Worker")
        cluster: dict[str, object] = {"kind": PYTORCHJOB.key}
        low, high = job.field("minReplicas"), job.field("maxReplicas")
        if isinstance(low, int) and isinstance(high, int):
            cluster["min_nodes"], cluster["max_nodes"] = low, high
            nodes = min(max(nodes, low), high)
        elif low is not None and high is not None:
            raise TypeError("minReplicas and maxReplicas must be whole numbers")
        note = (
            f"{self.kind}: written as an elastic {PYTORCHJOB.kind} (the TorchElastic controller installs on no "
            f"current cluster); set cluster.kind: {self.key} to keep it; its etcd rendezvous is torchdeck's own"
        )
        template = worker.template if worker else None
        return ImportShape(template, template, nodes, cluster, notes=[note])


TRAINJOB_OVERRIDES = ("podSpecOverrides", "podTemplateOverrides", "runtimePatches")
"""Where each Trainer release takes the pods' settings, oldest first."""
RUN_POLICY_SUSPEND = ("spec", "runPolicy", "suspend")
SPEC_SUSPEND = ("spec", "suspend")
RELEASES = operator_releases()
"""The releases the real cluster runs (manifests/versions.toml): the newest target of each kind."""
TRAINING_OPERATOR, TRAINER, MPI_OPERATOR = (RELEASES[k] for k in ("training_operator", "trainer", "mpi_operator"))


def _trainer(release: str, pod_overrides: str) -> Target:
    return Target(f"Kubeflow Trainer {release}", f"trainjob-trainer-{release}.yaml", "v1alpha1", pod_overrides)


PYTORCHJOB = PyTorchJobKind(
    "pytorchjob",
    "kubeflow.org",
    "v1",
    "pytorchjobs",
    "PyTorchJob",
    "the Kubeflow Training Operator v1",
    'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/standalone'
    f'?ref={TRAINING_OPERATOR}"',
    pod_label="training.kubeflow.org/job-name",
    operator_name="pytorchjob-controller",
    suspend_at=RUN_POLICY_SUSPEND,
    targets=(
        Target(f"Kubeflow Training Operator {TRAINING_OPERATOR}", f"pytorchjob-trainer-{TRAINING_OPERATOR}.yaml", "v1"),
    ),
    live=True,
    container="pytorch",
    replicas_at="pytorchReplicaSpecs",
)
TRAINJOB = TrainJobKind(
    "trainjob",
    "trainer.kubeflow.org",
    "v1alpha1",
    "trainjobs",
    "TrainJob",
    "Kubeflow Trainer v2",
    'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/'
    f'manifests/overlays/manager?ref={TRAINER}", then the same with overlays/runtimes',
    "TrainJob: the pods' security context comes from the ClusterTrainingRuntime, not from torchdeck",
    pod_label=JOBSET_NAME_LABEL,
    suspend_at=SPEC_SUSPEND,
    # the older releases stay declared here, beside their CRD files; the newest is the cluster's
    targets=(
        _trainer("v2.0.1", "podSpecOverrides"),
        _trainer("v2.1.0", "podTemplateOverrides"),
        _trainer("v2.2.1", "runtimePatches"),
        _trainer(TRAINER, "runtimePatches"),
    ),
    importable=False,
    elastic=False,
    init_containers=False,  # its CRD keeps only env and volumes of one
)
MPIJOB = MpiJobKind(
    "mpijob",
    "kubeflow.org",
    "v2beta1",
    "mpijobs",
    "MPIJob",
    "the Kubeflow MPI Operator",
    "kubectl apply --server-side -f https://raw.githubusercontent.com/kubeflow/mpi-operator/"
    f"{MPI_OPERATOR}/deploy/v2beta1/mpi-operator.yaml",
    "MPIJob: the image needs OpenMPI and an SSH server that runs as uid 1000 with its keys "
    f"in {MPI_SSH_DIR}, as torchdeck image build --mpi makes it",
    pod_label="training.kubeflow.org/job-name",
    operator_name="mpi-operator",
    suspend_at=RUN_POLICY_SUSPEND,
    targets=(Target(f"Kubeflow MPI Operator {MPI_OPERATOR}", f"mpijob-mpi-operator-{MPI_OPERATOR}.yaml", "v2beta1"),),
    # the Training Operator v1 serves MPIJob v1: its manifests import, though torchdeck renders v2beta1
    import_crds={"v1": f"mpijob-v1-trainer-{TRAINING_OPERATOR}.yaml"},
    extra_requests=MPI_LAUNCHER_RESOURCES["requests"],
    live=True,
    replicas_at="mpiReplicaSpecs",
    elastic=False,
    article="an",
    missing_hint="the Kubeflow Training Operator v1 installs an MPIJob v1 CRD; install the MPI Operator "
    "(v2beta1) instead, or use --kind pytorchjob",
)
INDEXED_JOB = IndexedJobKind(
    "job",
    "batch",
    "v1",
    "jobs",
    "Job",
    "nothing (built into Kubernetes)",
    "",
    pod_label="batch.kubernetes.io/job-name",
    suspend_at=SPEC_SUSPEND,
    beside=("Service",),  # the headless Service that names the pods for the rendezvous
    live=True,
)
ELASTICJOB = ElasticJobKind(
    "elasticjob",
    "elastic.pytorch.org",
    "v1alpha1",
    "elasticjobs",
    "ElasticJob",
    "the TorchElastic controller (v0.2.2, 2022, unmaintained)",
    "none works on Kubernetes 1.22 or later: its CRD is apiextensions.k8s.io/v1beta1, "
    "which 1.22 removed; use --kind pytorchjob with cluster.min_nodes and "
    "cluster.max_nodes (the same elastic job), or --kind job",
    "ElasticJob: the TorchElastic controller's CRD is apiextensions.k8s.io/v1beta1, which "
    "Kubernetes removed in 1.22 (EKS's oldest supported release is newer), so it installs on "
    "no current cluster; torchdeck submits it only where the cluster already serves it. "
    "The same elastic job: --kind pytorchjob with cluster.min_nodes and cluster.max_nodes",
    queued=False,
    beside=("Deployment", "Service", "NetworkPolicy"),  # its etcd
    # not on the real cluster (no current Kubernetes serves its CRD): its one release stays here
    targets=(Target("TorchElastic controller v0.2.2", "elasticjob-elastic-v0.2.2.yaml", "v1alpha1"),),
    container="elasticjob-worker",
    replicas_at="replicaSpecs",
    entrypoint_is_torchrun=True,  # the TorchElastic images' entrypoint is the launcher
    article="an",
)
JOB_KINDS: dict[JobKindName, JobKind] = {k.key: k for k in (PYTORCHJOB, TRAINJOB, MPIJOB, INDEXED_JOB, ELASTICJOB)}
assert tuple(JOB_KINDS) == KINDS, "every kind of the spec is one object here, in the spec's order"


@dataclass(frozen=True)
class ListedKind:
    """A kind of training job that ``jobs`` lists beside the kinds torchdeck runs, and does not
    follow: its row's facts only."""

    key: str
    kind: str
    api: ApiKind
    pod_label: str
    """The label its controller puts on its pods, with its name (``kubectl logs -l`` finds them)."""
    shown_by: tuple[str, ...] = ()
    """The kinds whose row shows it (their controller made it): it has no row of its own then."""


JOBSET = ListedKind(
    "jobset",
    "JobSet",
    ApiKind.of_group("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    JOBSET_NAME_LABEL,
    shown_by=(TRAINJOB.kind,),  # Trainer v2 runs each TrainJob as a JobSet of its own
)
LISTED_ALONE: tuple[ListedKind, ...] = (JOBSET,)
"""Kinds listed, not followed (a JobSet made with kubectl or by a pipeline)."""
TASK_KIND = INDEXED_JOB
"""The kind of the one-pod jobs around training (data preparation, the model test)."""
KEY_BY_KIND: dict[str, JobKindName] = {k.kind: key for key, k in JOB_KINDS.items()}
"""A job object's ``kind`` (PyTorchJob) -> torchdeck's name of it (pytorchjob)."""
CONTAINERS = tuple(dict.fromkeys(k.container for k in JOB_KINDS.values()))
"""The training containers' names, any kind's."""


def job_kind_of(obj: Json) -> JobKind | None:
    """The kind of a job object (None: not a training job kind)."""
    key = KEY_BY_KIND.get(str(obj.get("kind", "")))
    return JOB_KINDS[key] if key else None


def importable_kind(kind: object) -> JobKind | None:
    """The kind of a manifest's object that ``torchdeck import`` reads (None: not one)."""
    found = KEY_BY_KIND.get(kind) if isinstance(kind, str) else None
    return JOB_KINDS[found] if found and JOB_KINDS[found].importable else None


def live_kind(word: str) -> JobKindName | None:
    """The kind kubectl's name says (``pytorchjob``, ``pytorchjobs``, ``pytorchjobs.kubeflow.org``,
    ``jobs.batch``), where ``torchdeck import KIND/NAME`` reads it from a cluster; None otherwise."""
    key = word.lower().split(".", 1)[0].removesuffix("s")
    found = next((k for k in JOB_KINDS.values() if k.key == key and k.live), None)
    return found.key if found is not None else None


def live_words() -> str:
    """The ``KIND/NAME`` forms ``torchdeck import`` reads from a cluster, in words."""
    words = [f"{k.key}/NAME" for k in JOB_KINDS.values() if k.live]
    return ", ".join(words[:-1]) + " or " + words[-1]
