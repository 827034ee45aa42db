"""Kubernetes manifests for a job spec, rendered from the Jinja templates in
``manifests/`` (package data). Rendering is apart from applying: ``render``
returns plain objects, ``to_yaml`` the text a user reviews, pipes to
``kubectl apply -f -`` or commits for GitOps; the kubernetes backend applies
the same objects.

Every pod runs torchrun over ``torchdeck.trainer`` with the spec's CPU,
memory and GPU requests, a memory-backed /dev/shm, the shared volume, the
service account, GPU node placement, a restricted security context with a
writable scratch folder, and labels that find every pod of the job.

Why one module of this size (about 620 lines): every kind's context, the user code's bundle and
relay, the task jobs' manifests and the kubelet's escaping meet in the one ``context`` the
templates read; the kinds' API facts are ``kinds.JOB_KINDS``, their states ``jobs.py``, the
operators' releases ``crds.py``, the bundle ``../bundle.py``."""

from __future__ import annotations

import base64
import functools
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import yaml

from ...trainer.check import NODE_NAME_ENV
from ...trainer.s3url import S3Url
from ...trainer.triage_probe import FR_BUFFER_SIZE, STUCK_ENV, TRIAGE_DIR_ENV
from .. import bundle as code_bundle
from ..base import Plan, PlanPayload
from ..errors import SpecError
from ..files import size_words
from ..names import check_run_id
from ..spec import KINDS, JobKindName, JobSpec, trainer_arguments, validate
from . import crds
from .diagnosis import Finding
from .kind_objects import JobObject, Json
from .kinds import JOB_KINDS, RDZV_PORT, TASK_KIND, TORCHRUN, job_kind_of
from .render_context import JsonObject, KindInputs, RenderContext, Resources

if TYPE_CHECKING:
    import jinja2

RUN_LABEL = "torchdeck.dev/run"
"""Every object and pod of a run carries it: the one selector that finds them."""
JOB_LABEL = "torchdeck.dev/job"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
"""The EFA device plugin's resource: the interfaces a pod asks for."""
RESUMES_LABEL = "torchdeck.dev/resumes"
"""On a job that continues another run (``torchdeck resume``): that run's id."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""Kueue's label naming the LocalQueue a job is submitted to (kubernetes-sigs/kueue)."""
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
"""Kueue's label naming a queued job's WorkloadPriorityClass."""
POD_TRIAGE_DIR = "/tmp/torchdeck-triage"
POD_STUCK_AFTER_S = "60"
"""In pods nobody asks a rank where it is: its probe says so in its log once its main thread has
stayed on one line of Python this long (a collective that waits, a sleep), once per such spell."""
# Images torchdeck itself chooses are pinned by digest: a tag can be moved to other bytes (the etcd
# an ElasticJob brings along is its kind's: kinds.ETCD_IMAGE).
AWS_CLI_IMAGE = (
    "public.ecr.aws/aws-cli/aws-cli:2.27.26@sha256:ce3aee116adc8e9ba7ad27295102eb1c9c91525fbad18f45ee7a9bfd01cfec73"
)
"""Fetches a code bundle from S3 in an init container, with the pod's service account (IRSA)."""
PROGRAM_ANNOTATION = "torchdeck.dev/program"
"""On the job object of a run of the user's own code: what its ranks run (the reader parses their text)."""
PATTERN_ANNOTATION = "torchdeck.dev/metrics-pattern"
SPEC_ANNOTATION = "torchdeck.dev/spec"
"""The spec the job was made from (JSON): its budget and price, and what a comparison of runs shows."""
CODE_LABEL = "torchdeck.dev/code"
RANK_PREFIX = "[rank${rank}]:"
"""torchrun's per-line prefix for the user's code (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, with
--tee): every line in a pod's log (and mpirun's) says which rank wrote it."""
INIT_RESOURCES = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
RESTRICTED = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
"""Run ids become object names; operators append "-worker-NN" and the like
to name pods, and a pod's hostname is at most 63 characters."""


PODS_ANNOTATION = "torchdeck.dev/pods"
"""On a job torchdeck did not make (``torchdeck import KIND/NAME``): the selector of its pods,
which carry its operator's labels and not the run label."""


def pod_selector(job: Json) -> str:
    """The label selector that finds a job object's pods: the run label, except on a job torchdeck
    did not make (its controller's label), and on a job whose release cannot label its pods (a
    TrainJob for Trainer v2.0: they carry their controller's label, the JobSet's name)."""
    kind = job_kind_of(job)
    view = kind.view(job) if kind is not None else JobObject.read(job)
    adopted = view.annotations.get(PODS_ANNOTATION)
    if adopted:
        return adopted
    if kind is not None and not kind.pods_carry_run_label(view):
        return f"{kind.pod_label}={view.name}"
    return f"{RUN_LABEL}={view.name}"


@dataclass
class Rendered(PlanPayload):
    """A job's manifests: the objects in apply order, and what to tell the user."""

    kind: JobKindName
    name: str
    namespace: str
    objects: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    target: crds.Target | None = None
    """The operator release the custom kind was rendered for (None: a built-in kind)."""
    bundle: code_bundle.Bundle | None = None
    """The user's code folder, packed, where the pods get it as a bundle."""
    bundle_url: str | None = None
    """s3://... where the bundle travels through the bucket (None: in its ConfigMap, among the objects)."""

    @property
    def main(self) -> dict[str, Any]:
        """The object that is the job (the last one: services come first)."""
        return self.objects[-1]

    def summary(self) -> list[str]:
        """The code bundle as a person reads it in the plan: its files and size, not its base64."""
        if self.bundle is None:
            return []
        b = self.bundle
        return [
            f"code bundle: {b.files} file(s), {size_words(b.size)} ({size_words(len(b.data))} packed) from {b.source}"
        ]

    def to_yaml(self) -> str:
        header = "".join(f"# warning: {w}\n" for w in self.warnings)
        return header + yaml.safe_dump_all(self.objects, sort_keys=False, width=120)


def rendered_plan(
    backend: str,
    spec: JobSpec,
    rendered: Rendered,
    findings: Sequence[Finding] = (),
    notes: Sequence[str] = (),
) -> Plan:
    """A cluster's plan from its rendered objects: what ``train --dry-run`` and ``render`` print and
    ``KubernetesBackend.apply`` creates."""
    code = ""
    if rendered.bundle is not None:
        code = rendered.bundle_url or f"configmap {rendered.namespace}/{rendered.bundle.configmap}"
    return Plan(
        backend,
        rendered.name,
        spec,
        objects=rendered.objects,
        target=rendered.target.release if rendered.target is not None else "",
        code=code,
        findings=[f"{f.where}: {f.problem}" for f in findings],
        fixes=[f.fix for f in findings],
        notes=[*(f"warning: {w}" for w in rendered.warnings), *notes],
        payload=rendered,
    )


@functools.lru_cache(maxsize=1)
def template_environment() -> jinja2.Environment:
    import jinja2  # only rendering needs it

    loader = jinja2.FunctionLoader(lambda name: (resources.files("torchdeck") / "manifests" / name).read_text())
    return jinja2.Environment(
        loader=loader, undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True
    )


def as_written(objects: list[JsonObject]) -> list[JsonObject]:
    """The objects with every container's command, args and env values escaped for the kubelet,
    which expands ``$(NAME)`` in them (``$$`` is its escape for ``$``): an argument reaches the
    pod as it reaches torchrun on this machine (``--out '$(HOME)/x'`` ran with ``/root/x`` in the
    pod). Every kind's containers pass here, TrainJob's ``trainer`` too; torchdeck's own commands
    use no ``$(...)``."""

    def escape(text: object) -> object:
        return text.replace("$", "$$") if isinstance(text, str) else text

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "image" in node and any(k in node for k in ("command", "args", "env")):
                for key in ("command", "args"):
                    if isinstance(node.get(key), list):
                        node[key] = [escape(a) for a in node[key]]
                for item in node.get("env") or []:
                    if isinstance(item, dict) and "value" in item:
                        item["value"] = escape(item["value"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(objects)
    return objects


def _check_kind(kind: str) -> JobKindName:
    if kind not in KINDS:
        raise SpecError("cluster.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def _check_name(run_id: str) -> None:
    check_run_id(run_id, "name")


def code_dir(spec: JobSpec) -> str:
    """Where the user's code is in the pods: the image's folder, or where the bundle is unpacked."""
    return spec.entrypoint.in_image or code_bundle.CODE_DIR


def program(spec: JobSpec, checkpoint_dir: str) -> list[str]:
    """What torchrun runs on every rank, with its arguments: the built-in trainer, or the user's
    script (by its path in the pods) or module."""
    e = spec.entrypoint
    if spec.builtin:
        return ["-m", "torchdeck.trainer", *trainer_arguments(spec, spec.cluster.data_dir, checkpoint_dir)]
    run = ["-m", e.module, *e.args] if e.module else [f"{code_dir(spec)}/{e.script}", *e.args]
    if e.in_image:  # the image's own code: no bundle, so no relay
        return run
    # through the relay the bundle carries: a bar's redraws and the loggers' scalars reach the log
    return [f"{code_bundle.CODE_DIR}/{code_bundle.RELAY_DIR}/relay.py", *run]


def user_env(spec: JobSpec) -> list[JsonObject]:
    """The user's code imports from its folder (and the requirements installed beside it), and
    torchrun prefixes every line with its rank."""
    path = code_dir(spec)
    if spec.entrypoint.requirements and not spec.entrypoint.in_image:
        path += ":" + code_bundle.DEPS_DIR
    env: list[JsonObject] = [
        {"name": "PYTHONPATH", "value": path},
        {"name": "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "value": RANK_PREFIX},
    ]
    if spec.metrics.tags:  # which logger scalar is which, for the relay
        env.append({"name": "TORCHDECK_METRIC_TAGS", "value": json.dumps(spec.metrics.tags, sort_keys=True)})
    if spec.metrics.pattern:  # how the relay knows a rank got to its first step (a crash loop's test)
        env.append({"name": "TORCHDECK_METRICS_PATTERN", "value": spec.metrics.pattern})
    return env


def bundle_configmap(spec: JobSpec, packed: code_bundle.Bundle) -> JsonObject:
    """The ConfigMap that carries a small bundle: named by its digest and immutable, so runs of the
    same code share it and it is sent once."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": packed.configmap,
            "namespace": spec.namespace,
            "labels": {
                "app.kubernetes.io/name": "torchdeck",
                "app.kubernetes.io/managed-by": "torchdeck",
                CODE_LABEL: packed.sha256[:63],
            },
        },
        "immutable": True,
        "binaryData": {code_bundle.BUNDLE_FILE: base64.b64encode(packed.data).decode()},
    }


def _init_container(name: str, image: str, command: list[str], mounts: list[JsonObject]) -> JsonObject:
    return {
        "name": name,
        "image": image,
        "command": command,
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": INIT_RESOURCES,
        "securityContext": RESTRICTED,
        "volumeMounts": mounts,
    }


def add_bundle(
    ctx: RenderContext, spec: JobSpec, kind: JobKindName, packed: code_bundle.Bundle, url: str | None
) -> None:
    """The pods get the bundle: its ConfigMap (or, from ``url``, an S3 fetch) in a volume, an init
    container that checks and unpacks it into the working directory (and installs the
    requirements beside it). Where a kind's pods take no init container of ours (a TrainJob's CRD
    keeps only env and volumes of one), the trainer's own command unpacks it first."""
    e = spec.entrypoint
    src = f"{code_bundle.BUNDLE_DIR}/{code_bundle.BUNDLE_FILE}"
    code_mount: JsonObject = {"name": "code", "mountPath": code_bundle.CODE_ROOT}
    bundle_mount: JsonObject = {"name": "code-bundle", "mountPath": code_bundle.BUNDLE_DIR}
    scratch: JsonObject = {"name": "scratch", "mountPath": "/tmp"}
    info = JOB_KINDS[kind]
    ctx.volumes = ctx.volumes + [
        {"name": "code", "emptyDir": {}},
        {"name": "code-bundle", "emptyDir": {}}
        if url
        else {
            "name": "code-bundle",
            "configMap": {
                "name": packed.configmap,
                "items": [{"key": code_bundle.BUNDLE_FILE, "path": code_bundle.BUNDLE_FILE}],
            },
        },
    ]
    ctx.volume_mounts = ctx.volume_mounts + [code_mount, bundle_mount]
    unpack = ["python", "-c", code_bundle.UNPACK, src, packed.sha256, code_bundle.CODE_DIR]
    install = (
        ["python", "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check", "--target",
         code_bundle.DEPS_DIR, "-r", f"{code_bundle.CODE_DIR}/{e.requirements}"]
        if e.requirements
        else []
    )  # fmt: skip
    if not info.init_containers:
        if url:
            raise SpecError(
                "entrypoint.code",
                f"the code bundle is {len(packed.data) / 1024:.0f} KiB, over the {code_bundle.CONFIGMAP_LIMIT // 1024} "
                f"KiB a ConfigMap carries, and {info.article} {info.kind}'s pods cannot fetch it from S3 (its CRD "
                "takes no init container)",
                f"use --kind {KINDS[0]}, leave files out with .dockerignore, or bake the code in: torchdeck image "
                "build --code DIR",
            )
        steps = [unpack] + ([install] if install else [])
        script = " && ".join(shlex.join(step) for step in steps)
        unpack_first = ["sh", "-c", f'{script} && cd {code_bundle.CODE_DIR} && exec "$@"', "torchdeck-code"]
        ctx.command = unpack_first + ctx.command
        return
    mounts = [code_mount, bundle_mount, scratch]
    init = []
    if url:
        init.append(
            _init_container(
                "fetch-code",
                AWS_CLI_IMAGE,
                ["aws", "s3", "cp", "--only-show-errors", url, src],
                [bundle_mount, scratch],
            )
        )
    init.append(_init_container("unpack-code", spec.image or "", unpack, mounts))
    if install:
        init.append(_init_container("install-requirements", spec.image or "", install, mounts))
    ctx.init_containers = init


def run_labels(run_id: str, job_name: str) -> dict[str, str]:
    """The labels of a run's job and pods (and of a job ``torchdeck import KIND/NAME`` adopts)."""
    return {
        "app.kubernetes.io/name": "torchdeck",
        "app.kubernetes.io/managed-by": "torchdeck",
        RUN_LABEL: run_id,
        JOB_LABEL: job_name,
    }


def container_resources(spec: JobSpec) -> Resources:
    """The training container's requests and limits (memory, GPUs and EFA interfaces limited as asked)."""
    r = spec.resources
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if r.cpu:
        requests["cpu"] = r.cpu
    if r.memory:
        requests["memory"] = limits["memory"] = r.memory
    if r.gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(r.gpus)
    if r.efa:
        requests[EFA_RESOURCE] = limits[EFA_RESOURCE] = str(r.efa)
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def pod_env(spec: JobSpec, run_id: str) -> list[JsonObject]:
    """Every rank's environment: the run's id, the node's name, the hang-triage probe's settings
    (unless the spec sets them) and the spec's own variables."""
    env: list[JsonObject] = [
        {"name": "TORCHDECK_RUN_ID", "value": run_id},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "HOME", "value": "/tmp"},
        # which node the pod is on, as the downward API says it: the health gate names nodes by it
        {"name": NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    # each rank's hang-triage probe (trainer/triage_probe.py) dumps where it is to its log once its
    # main thread has stayed on one line this long, with the Flight Recorder's newest collectives
    probe = {TRIAGE_DIR_ENV: POD_TRIAGE_DIR, STUCK_ENV: POD_STUCK_AFTER_S, "TORCH_FR_BUFFER_SIZE": FR_BUFFER_SIZE}
    env += [{"name": k, "value": v} for k, v in probe.items() if k not in spec.env]
    env += [{"name": k, "value": v} for k, v in sorted(spec.env.items())]
    return env


def pod_volumes(spec: JobSpec) -> tuple[list[JsonObject], list[JsonObject]]:
    """The pods' mounts and volumes: a memory-backed /dev/shm, a writable scratch folder, and the
    shared claim (or a folder of the pod's own where there is none)."""
    c = spec.cluster
    mounts: list[JsonObject] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "scratch", "mountPath": "/tmp"},
        {"name": "shared", "mountPath": c.mount_path},
    ]
    volumes: list[JsonObject] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shm_size}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "shared", "persistentVolumeClaim": {"claimName": c.pvc}}
        if c.pvc
        else {"name": "shared", "emptyDir": {}},
    ]
    return mounts, volumes


def job_labels(spec: JobSpec, labels: dict[str, str]) -> dict[str, str]:
    """The job object's own labels: a queue's name is Kueue's to read there, and only there (a pod
    with it would be a pod Kueue queues on its own)."""
    c, found = spec.cluster, dict(labels)
    if c.queue:
        found[QUEUE_LABEL] = c.queue
        if c.priority_class:
            found[PRIORITY_LABEL] = c.priority_class
    if spec.resumes:
        found[RESUMES_LABEL] = spec.resumes
    return found


def context(spec: JobSpec, run_id: str, kind: JobKindName) -> RenderContext:
    """Everything the templates need, worked out once: what every kind shares here, then the
    kind's own part (``JobKind.render``)."""
    c = spec.cluster
    labels = run_labels(run_id, spec.name)
    checkpoint_dir = c.checkpoint_dir or f"{c.mount_path.rstrip('/')}/runs/{spec.name}"
    trainer = program(spec, checkpoint_dir)
    env = pod_env(spec, run_id)
    mounts, volumes = pod_volumes(spec)
    gpu_taint: JsonObject = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    torchrun = ["--nproc-per-node", str(spec.nproc_per_node), "--max-restarts", str(spec.max_restarts)]
    if not spec.builtin:  # every line of the user's code says its rank (the reader parses text)
        torchrun += ["--tee", "3"]
        env += user_env(spec)
    ctx = RenderContext(
        name=run_id,
        namespace=spec.namespace,
        labels=labels,
        job_labels=job_labels(spec, labels),
        suspend=bool(c.queue),  # Kueue admits it by unsuspending it
        selector={RUN_LABEL: run_id},
        image=spec.image,
        nodes=spec.nodes,
        nproc_per_node=spec.nproc_per_node,
        max_restarts=spec.max_restarts,
        min_nodes=c.min_nodes,
        max_nodes=c.max_nodes,
        elastic=c.min_nodes is not None,
        backoff_limit=c.backoff_limit,
        clean_pod_policy=c.clean_pod_policy,
        ttl_seconds_after_finished=c.ttl_seconds_after_finished,
        restart_policy=c.restart_policy,
        pod_restart_policy="OnFailure" if c.restart_policy == "OnFailure" else "Never",
        service_account=c.service_account,
        image_pull_policy=c.image_pull_policy,
        node_selector=c.node_selector,
        tolerations=([gpu_taint] if spec.resources.gpus and c.gpu_toleration else [])
        + node_loss_tolerations(c.node_loss),
        pod_annotations={FORCE_DELETE_ANNOTATION: "true"} if c.node_loss is not None else {},
        affinity=placed(run_id, spec.nodes, c.avoid_nodes),
        resources=container_resources(spec),
        env=env,
        volume_mounts=mounts,
        volumes=volumes,
        runtime=c.runtime,
        rdzv_port=RDZV_PORT,
        command=list(TORCHRUN),
        args=torchrun + trainer,
        annotations={SPEC_ANNOTATION: kept_spec(spec)},
    )
    if not spec.builtin:
        ctx.annotations[PROGRAM_ANNOTATION] = spec.program
        if spec.metrics.pattern:
            ctx.annotations[PATTERN_ANNOTATION] = spec.metrics.pattern
        workdir = spec.entrypoint.workdir
        ctx.working_dir = f"{code_dir(spec)}/{workdir}" if workdir else code_dir(spec)
    user = user_env(spec) if not spec.builtin else []
    JOB_KINDS[kind].render(ctx, KindInputs(spec, run_id, torchrun, trainer, user, code_dir(spec)))
    return ctx


LOCAL_ONLY = ("data_dir", "download", "local_image")
"""Spec fields that say where things are on the machine that submitted (never on the cluster)."""


def kept_spec(spec: JobSpec) -> str:
    """The spec as the job keeps it (``SPEC_ANNOTATION``): JSON, without the submitting machine's paths."""
    data = {k: v for k, v in spec.to_dict().items() if k not in LOCAL_ONLY}
    data["entrypoint"] = {k: v for k, v in data["entrypoint"].items() if k not in ("code", "python")}
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


FORCE_DELETE_ANNOTATION = "kueue.x-k8s.io/safe-to-forcefully-delete"
"""Kueue's FailureRecoveryPolicy deletes a pod that carries it by force once it is stuck terminating
on an unreachable node (a minute after its grace period): what lets its operator make it again."""
LOST_NODE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def node_loss_tolerations(seconds: int | None) -> list[JsonObject]:
    """How long the pods stay on a node that stopped answering (``cluster.node_loss``): none where the
    spec leaves it to Kubernetes (its admission plugin adds 300 s)."""
    if seconds is None:
        return []
    return [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for key in LOST_NODE_TAINTS
    ]


def placed(run_id: str, nodes: int, avoid: list[str]) -> JsonObject:
    """The pods' affinity: kept off the nodes to avoid, and, for a run of several nodes, spread one
    to a node where the cluster has room (preferred, not required: a cluster of one node still runs
    it, and a run that lost a node comes back on the ones left)."""
    affinity = avoiding(avoid)
    if nodes > 1:
        term = {"labelSelector": {"matchLabels": {RUN_LABEL: run_id}}, "topologyKey": "kubernetes.io/hostname"}
        affinity["podAntiAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    return affinity


def avoiding(nodes: list[str]) -> JsonObject:
    """The pod affinity that keeps pods off ``nodes`` (by the Node object's name, which is what
    ``kubectl get nodes`` and a pod's ``spec.nodeName`` say; the hostname label may differ)."""
    if not nodes:
        return {}
    # one requirement a node: the API takes a single value for a metadata.name field selector
    fields = [{"key": "metadata.name", "operator": "NotIn", "values": [node]} for node in sorted(set(nodes))]
    term = {"matchFields": fields}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def render(
    spec: JobSpec,
    run_id: str,
    kind: str | None = None,
    target: crds.Target | None = None,
) -> Rendered:
    """The manifests that run ``spec`` as ``run_id`` (its object name), for ``target`` (the
    operator release the cluster runs: ``JobKind.target_for``), by default the newest supported.
    The user's code goes as a bundle, packed from entrypoint.code: in a ConfigMap among the
    objects, or through cluster.code_bucket where it is too large for one."""
    spec = validate(spec)
    kind = _check_kind(kind or spec.cluster.kind)
    info = JOB_KINDS[kind]
    target = target or info.latest
    _check_name(run_id)
    if not spec.image:
        raise SpecError(
            "image",
            "a cluster job needs a training image",
            "build and push one (torchdeck image build), then set image: or pass --image",
        )
    info.check_fields(spec)
    ctx = context(spec, run_id, kind)
    said = info.for_target(ctx, target)
    url, packed = None, None
    if not spec.builtin and not spec.entrypoint.in_image:
        packed = code_bundle.pack(spec.entrypoint.code, extra=code_bundle.relay_files())
        if not packed.fits_configmap:
            url = bundle_url(spec, packed)
        add_bundle(ctx, spec, kind, packed, url)
    text = template_environment().get_template(info.template).render(**vars(ctx))
    objects = as_written([o for o in yaml.safe_load_all(text) if o])
    if packed is not None and url is None:
        objects.insert(0, bundle_configmap(spec, packed))
    warnings = ([info.warning] if info.warning else []) + said
    if not spec.cluster.pvc:
        warnings.append("no cluster.pvc: the data and the checkpoints live in each pod's own folder and go with it")
    if url:
        warnings.append(f"the code bundle goes to {url}: torchdeck train uploads it (kubectl apply alone does not)")
    if packed is not None and (outputs := packed.outputs_warning()):
        warnings.append(outputs)
    e = spec.entrypoint
    missing = code_bundle.unresolved_imports(Path(e.code), e.script, e.requirements) if packed and e.script else []
    if missing:
        warnings.append(
            f"{e.script} imports {', '.join(missing)}, which the code folder, its requirements and the standard "
            "library do not hold: unless the image has them, add them to requirements.txt (entrypoint.requirements)"
        )
    return Rendered(kind, run_id, spec.namespace, objects, warnings, target, packed, url)


def bundle_url(spec: JobSpec, packed: code_bundle.Bundle) -> str:
    """Where a bundle too large for a ConfigMap goes: under cluster.code_bucket."""
    bucket = spec.cluster.code_bucket
    if not bucket:
        raise SpecError(
            "cluster.code_bucket",
            f"the code bundle of {packed.source} is {len(packed.data) / 1024:.0f} KiB compressed, over the "
            f"{code_bundle.CONFIGMAP_LIMIT // 1024} KiB a ConfigMap carries, and no bucket is set for it",
            "set cluster.code_bucket: s3://BUCKET/PREFIX (the pods' service account must read it), leave files "
            "out with .dockerignore, or bake the code in: torchdeck image build --code DIR",
        )
    location = S3Url.parse(bucket)
    return str(S3Url(location.bucket, packed.key(location.join("code").key if location.key else "torchdeck/code")))


TaskKind = Literal["data-prep", "model-test", "model-copy"]
"""The one-pod jobs around training (``tasks.py`` runs them)."""
TASKS: tuple[TaskKind, ...] = get_args(TaskKind)
TASK_LABEL = "torchdeck.dev/task"


def default_model_file(spec: JobSpec) -> str:
    """Where the trainer saves the model in the pods, unless the spec says."""
    c = spec.cluster
    return spec.model_file or f"{c.checkpoint_dir or c.mount_path.rstrip('/') + '/runs/' + spec.name}/model.pt"


def render_task(
    spec: JobSpec, task: TaskKind, name: str, model_file: str | None = None, source: str | None = None
) -> Rendered:
    """The data-prep job (CIFAR-10 onto the shared volume: the official archive, or a copy from
    ``source``, an s3:// prefix) or the model test job (``torchdeck.trainer.evaluate`` on the saved
    model), as one-pod Jobs."""
    spec = validate(spec)
    if task not in TASKS:
        raise SpecError("task", f"must be one of {', '.join(TASKS)}, got {task!r}")
    _check_name(name)
    if not spec.image:
        raise SpecError(
            "image", "a cluster job needs a training image", "build and push one, then set image: or pass --image"
        )
    ctx = context(spec, name, TASK_KIND.key)
    c = spec.cluster
    ctx.labels = {**ctx.labels, TASK_LABEL: task}
    ctx.job_labels = {**ctx.job_labels, TASK_LABEL: task}
    ctx.subdomain, ctx.ports, ctx.pod_restart_policy, ctx.container = None, [], "Never", task
    ctx.env = [e for e in ctx.env if not str(e["name"]).startswith("PET_")]
    if task == "data-prep":
        ctx.command = ["python", "-m", "torchdeck.trainer.data"]
        ctx.args = ["--data-dir", c.data_dir] + (["--from-s3", source] if source else [])
        ctx.resources = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}
        ctx.tolerations, ctx.node_selector = [], {}  # any node can download
    elif task == "model-copy":  # the model leaves the volume through S3 (source: where it goes)
        ctx.command = ["python", "-m", "torchdeck.trainer.model_file"]
        ctx.args = ["--copy", model_file or default_model_file(spec), source or ""]
        ctx.resources = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
        ctx.tolerations, ctx.node_selector = [], {}
    else:
        ctx.command = ["python", "-m", "torchdeck.trainer.evaluate"]
        ctx.args = [
            "--model-file",
            model_file or default_model_file(spec),
            "--data-dir",
            c.data_dir,
            "--device",
            spec.device,
            "--output",
            "json",
        ]
        if spec.resources.gpus > 1:  # one GPU is plenty to test a model
            gpu = {"nvidia.com/gpu": "1"}
            ctx.resources = {k: {**v, **gpu} for k, v in ctx.resources.items()}
    text = template_environment().get_template("task.yaml.j2").render(**vars(ctx))
    objects = as_written([o for o in yaml.safe_load_all(text) if o])
    warnings = [] if c.pvc else ["no cluster.pvc: the task sees none of the training job's files"]
    return Rendered(TASK_KIND.key, name, spec.namespace, objects, warnings)
