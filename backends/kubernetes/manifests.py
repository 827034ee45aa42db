"""Kubernetes manifests for a job spec, rendered from the Jinja templates in
``manifests/`` (package data). Rendering is apart from applying: ``render``
returns plain objects, ``to_yaml`` the text a user reviews, pipes to
``kubectl apply -f -`` or commits for GitOps; the kubernetes backend applies
the same objects.

Every pod runs torchrun over ``torchdeck.trainer`` with the spec's CPU,
memory and GPU requests, a memory-backed /dev/shm, the shared volume, the
service account, GPU node placement, a restricted security context with a
writable scratch folder, and labels that find every pod of the job."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from ..errors import SpecError
from ..spec import DNS_1035_RE, KINDS, JobSpec, check_kind_fields, trainer_arguments, validate
from . import crds

RUN_LABEL = "torchdeck.dev/run"
"""Every object and pod of a run carries it: the one selector that finds them."""
JOB_LABEL = "torchdeck.dev/job"
RDZV_PORT = 29400
ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.17"
MAX_NAME = 52
"""Run ids become object names; operators append "-worker-NN" and the like
to name pods, and a pod's hostname is at most 63 characters."""


@dataclass(frozen=True)
class KindInfo:
    """What a kind is on the API server, and what it needs there."""

    group: str
    version: str
    plural: str
    kind: str
    operator: str
    """What to install when its CRD is missing."""
    install: str
    warning: str = ""


MPI_SSH_DIR = "/home/trainer/.ssh"
"""Where the MPI Operator mounts the SSH keys: the home of the images' uid-1000
user (the operator's default, /root/.ssh, is not that user's)."""
KIND_INFO = {
    "pytorchjob": KindInfo(
        "kubeflow.org",
        "v1",
        "pytorchjobs",
        "PyTorchJob",
        "the Kubeflow Training Operator v1",
        'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=v1.9.4"',
    ),
    "trainjob": KindInfo(
        "trainer.kubeflow.org",
        "v1alpha1",
        "trainjobs",
        "TrainJob",
        "Kubeflow Trainer v2",
        'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/'
        'manifests/overlays/manager?ref=v2.3.0", then the same with overlays/runtimes',
        "TrainJob: the pods' security context comes from the ClusterTrainingRuntime, not from torchdeck",
    ),
    "mpijob": KindInfo(
        "kubeflow.org",
        "v2beta1",
        "mpijobs",
        "MPIJob",
        "the Kubeflow MPI Operator",
        "kubectl apply --server-side -f https://raw.githubusercontent.com/kubeflow/mpi-operator/"
        "v0.8.2/deploy/v2beta1/mpi-operator.yaml",
        "MPIJob: the image needs OpenMPI and an SSH server that runs as uid 1000 with its keys "
        f"in {MPI_SSH_DIR}; torchdeck's own images have neither (use pytorchjob or job with them)",
    ),
    "job": KindInfo("batch", "v1", "jobs", "Job", "nothing (built into Kubernetes)", ""),
    "elasticjob": KindInfo(
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
    ),
}


JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def pod_selector(job: dict[str, Any]) -> str:
    """The label selector that finds a job object's pods: the run label, except on a TrainJob for
    Trainer v2.0, which cannot label its pods (they carry their JobSet's name)."""
    name = job["metadata"]["name"]
    if job.get("kind") == "TrainJob" and "podSpecOverrides" in (job.get("spec") or {}):
        return f"{JOBSET_NAME_LABEL}={name}"
    return f"{RUN_LABEL}={name}"


@dataclass
class Rendered:
    """A job's manifests: the objects in apply order, and what to tell the user."""

    kind: str
    name: str
    namespace: str
    objects: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    target: crds.Target | None = None
    """The operator release the custom kind was rendered for (None: a built-in kind)."""

    @property
    def main(self) -> dict[str, Any]:
        """The object that is the job (the last one: services come first)."""
        return self.objects[-1]

    def to_yaml(self) -> str:
        header = "".join(f"# warning: {w}\n" for w in self.warnings)
        return header + yaml.safe_dump_all(self.objects, sort_keys=False, width=120)


@functools.lru_cache(maxsize=1)
def template_environment():
    import jinja2  # only rendering needs it

    loader = jinja2.FunctionLoader(lambda name: (resources.files("torchdeck") / "manifests" / name).read_text())
    return jinja2.Environment(
        loader=loader, undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True
    )


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise SpecError("cluster.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def _check_name(run_id: str) -> None:
    if not isinstance(run_id, str) or not DNS_1035_RE.match(run_id):
        raise SpecError(
            "name",
            f"the object name {run_id!r:.60} is not a DNS-1035 name",
            "lower-case letters, digits and '-', starting with a letter, ending with a letter or digit",
        )
    if len(run_id) > MAX_NAME:
        raise SpecError(
            "name",
            f"the run id {run_id!r} is {len(run_id)} characters; at most {MAX_NAME} fit in "
            "the pod names Kubernetes derives from it",
            "use a shorter job name",
        )


def context(spec: JobSpec, run_id: str, kind: str) -> dict[str, Any]:
    """Everything the templates need, worked out once."""
    c = spec.cluster
    r = spec.resources
    labels = {
        "app.kubernetes.io/name": "torchdeck",
        "app.kubernetes.io/managed-by": "torchdeck",
        RUN_LABEL: run_id,
        JOB_LABEL: spec.name,
    }
    checkpoint_dir = c.checkpoint_dir or f"{c.mount_path.rstrip('/')}/runs/{spec.name}"
    trainer = ["-m", "torchdeck.trainer", *trainer_arguments(spec, c.data_dir, checkpoint_dir)]
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if r.cpu:
        requests["cpu"] = r.cpu
    if r.memory:
        requests["memory"] = limits["memory"] = r.memory
    if r.gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(r.gpus)
    resources_ = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    env = [
        {"name": "TORCHDECK_RUN_ID", "value": run_id},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "HOME", "value": "/tmp"},
    ]
    env += [{"name": k, "value": v} for k, v in sorted(spec.env.items())]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "scratch", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": r.shm_size}},
        {"name": "scratch", "emptyDir": {}},
    ]
    mounts.append({"name": "shared", "mountPath": c.mount_path})
    volumes.append(
        {"name": "shared", "persistentVolumeClaim": {"claimName": c.pvc}}
        if c.pvc
        else {"name": "shared", "emptyDir": {}}
    )
    tolerations = (
        [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}] if r.gpus and c.gpu_toleration else []
    )
    torchrun = ["--nproc-per-node", str(spec.nproc_per_node), "--max-restarts", str(spec.max_restarts)]
    elastic = c.min_nodes is not None
    ctx: dict[str, Any] = dict(
        name=run_id,
        namespace=spec.namespace,
        labels=labels,
        selector={RUN_LABEL: run_id},
        image=spec.image,
        nodes=spec.nodes,
        nproc_per_node=spec.nproc_per_node,
        max_restarts=spec.max_restarts,
        min_nodes=c.min_nodes,
        max_nodes=c.max_nodes,
        elastic=elastic,
        backoff_limit=c.backoff_limit,
        clean_pod_policy=c.clean_pod_policy,
        ttl_seconds_after_finished=c.ttl_seconds_after_finished,
        restart_policy=c.restart_policy,
        pod_restart_policy="OnFailure" if c.restart_policy == "OnFailure" else "Never",
        service_account=c.service_account,
        node_selector=c.node_selector,
        tolerations=tolerations,
        subdomain=None,
        resources=resources_,
        env=env,
        volume_mounts=mounts,
        volumes=volumes,
        ports=[],
        runtime=c.runtime,
        rdzv_port=RDZV_PORT,
        command=["python", "-m", "torch.distributed.run"],
        args=torchrun + trainer,
        container="trainer",
    )
    if kind == "pytorchjob":
        ctx["container"] = "pytorch"  # the operator finds its container by this name
        ctx["replica_roles"] = (
            [("Worker", spec.nodes)]
            if elastic
            else [("Master", 1)] + ([("Worker", spec.nodes - 1)] if spec.nodes > 1 else [])
        )
    elif kind == "trainjob":
        ctx["args"] = trainer  # the runtime's torch policy sets torchrun's node and process counts
        ctx["command"] = ["python", "-m", "torch.distributed.run", "--max-restarts", str(spec.max_restarts)]
    elif kind == "mpijob":
        endpoint = f"{run_id}-worker-0.{run_id}.{spec.namespace}.svc:{RDZV_PORT}"
        launch = [
            "-np",
            str(spec.nodes),
            "--map-by",
            "ppr:1:node",
            "--bind-to",
            "none",
            "python",
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(spec.nodes),
            *torchrun,
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            run_id,
            *trainer,
        ]
        launcher_resources = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}
        rdzv_ports = [{"name": "rdzv", "containerPort": RDZV_PORT}]
        ctx["mpi_roles"] = [
            ("Launcher", 1, "launcher", ["mpirun"], launch, launcher_resources, []),
            ("Worker", spec.nodes, "worker", ["/usr/sbin/sshd", "-De"], [], resources_, rdzv_ports),
        ]
        ctx["ssh_auth_mount_path"] = MPI_SSH_DIR
    elif kind == "job":
        ctx["subdomain"] = run_id
        ctx["ports"] = [{"name": "rdzv", "containerPort": RDZV_PORT}]
        nnodes = f"{c.min_nodes}:{c.max_nodes}" if elastic else str(spec.nodes)
        ctx["env"] = env + [
            {"name": "PET_NNODES", "value": nnodes},
            {"name": "PET_RDZV_BACKEND", "value": "c10d"},
            {"name": "PET_RDZV_ENDPOINT", "value": f"{run_id}-0.{run_id}:{RDZV_PORT}"},
            {"name": "PET_RDZV_ID", "value": run_id},
        ]
    elif kind == "elasticjob":
        ctx["container"] = "elasticjob-worker"
        ctx["pod_restart_policy"] = "Never"
        ctx["min_nodes"] = c.min_nodes if elastic else spec.nodes
        ctx["max_nodes"] = c.max_nodes if elastic else spec.nodes
        ctx["etcd_image"] = ETCD_IMAGE
        ctx["etcd_labels"] = {"app.kubernetes.io/name": "torchdeck-etcd", RUN_LABEL: run_id}
    return ctx


def render(spec: JobSpec, run_id: str, kind: str | None = None, target: crds.Target | None = None) -> Rendered:
    """The manifests that run ``spec`` as ``run_id`` (its object name), for ``target`` (the
    operator release the cluster runs: ``crds.for_cluster``), by default the newest supported."""
    spec = validate(spec)
    kind = _check_kind(kind or spec.cluster.kind)
    target = target or crds.latest(kind)
    _check_name(run_id)
    if not spec.builtin:
        raise SpecError(
            "entrypoint",
            f"this version runs your own code ({spec.program}) on the local backend only",
            "run it with --backend local; on a cluster, bake it into an image that runs it as the training "
            "program for now",
        )
    if not spec.image:
        raise SpecError(
            "image",
            "a cluster job needs a training image",
            "build and push one (torchdeck image build), then set image: or pass --image",
        )
    check_kind_fields(spec, kind)
    ctx = context(spec, run_id, kind)
    ctx["pod_overrides"] = target.pod_overrides if target else ""
    text = template_environment().get_template(f"{kind}.yaml.j2").render(**ctx)
    objects = [o for o in yaml.safe_load_all(text) if o]
    info = KIND_INFO[kind]
    warnings = [info.warning] if info.warning else []
    if target and target.pod_overrides == "podSpecOverrides":
        warnings.append(
            f"TrainJob for {target.release}: its pods carry the JobSet's labels, not the run's; "
            "torchdeck finds them by the JobSet's name"
        )
    if not spec.cluster.pvc:
        warnings.append("no cluster.pvc: the data and the checkpoints live in each pod's own folder and go with it")
    return Rendered(kind, run_id, spec.namespace, objects, warnings, target)


TASKS = ("data-prep", "model-test", "model-copy")
TASK_LABEL = "torchdeck.dev/task"


def default_model_file(spec: JobSpec) -> str:
    """Where the trainer saves the model in the pods, unless the spec says."""
    c = spec.cluster
    return spec.model_file or f"{c.checkpoint_dir or c.mount_path.rstrip('/') + '/runs/' + spec.name}/model.pt"


def render_task(
    spec: JobSpec, task: str, name: str, model_file: str | None = None, source: str | None = None
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
    ctx = context(spec, name, "job")
    c = spec.cluster
    ctx["labels"] = {**ctx["labels"], TASK_LABEL: task}
    ctx.update(subdomain=None, ports=[], pod_restart_policy="Never", container=task)
    ctx["env"] = [e for e in ctx["env"] if not e["name"].startswith("PET_")]
    if task == "data-prep":
        ctx["command"] = ["python", "-m", "torchdeck.trainer.data"]
        ctx["args"] = ["--data-dir", c.data_dir] + (["--from-s3", source] if source else [])
        ctx["resources"] = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}
        ctx["tolerations"], ctx["node_selector"] = [], {}  # any node can download
    elif task == "model-copy":  # the model leaves the volume through S3 (source: where it goes)
        ctx["command"] = ["python", "-m", "torchdeck.trainer.model_file"]
        ctx["args"] = ["--copy", model_file or default_model_file(spec), source or ""]
        ctx["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
        ctx["tolerations"], ctx["node_selector"] = [], {}
    else:
        ctx["command"] = ["python", "-m", "torchdeck.trainer.evaluate"]
        ctx["args"] = [
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
            ctx["resources"] = {k: {**v, **gpu} for k, v in ctx["resources"].items()}
    text = template_environment().get_template("task.yaml.j2").render(**ctx)
    objects = [o for o in yaml.safe_load_all(text) if o]
    warnings = [] if c.pvc else ["no cluster.pvc: the task sees none of the training job's files"]
    return Rendered("job", name, spec.namespace, objects, warnings)
