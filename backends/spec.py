"""``JobSpec``: one training job, described the same way on a laptop and on
EKS, and its YAML file (``torchdeck.yaml`` by default).

Loading validates every field and names the bad one
(``torchdeck.yaml: trainer.epochs: must be an integer >= 1, got 'ten'``);
unknown keys are errors with a "did you mean" hint, so a typo never silently
falls back to a default.

Why one module of this size: the spec's dataclasses and the check of each of their fields belong
together (a field and its check side by side); reading and writing the file is ``files.py``."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from ..trainer.s3url import S3Url
from .cost import money
from .errors import SpecError
from .files import load_yaml, parse_yaml, replace_text
from .names import DNS_1035_RE, check_bucket_name, check_code_path, check_s3_prefix
from .names import SUBDOMAIN_RE as DNS_SUBDOMAIN_RE

DEFAULT_SPEC_FILE = "torchdeck.yaml"
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?\Z")
"""Names of objects a run makes (and so job names, which start them): a letter first, as Service
names, the PyTorchJob webhook and TrainJob's CEL rule demand."""
MAX_JOB_NAME = 40
LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
IMAGE_RE = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?\Z"
)
"""An image reference as the engines take one: a registry host that starts and ends with a letter or
digit (``--privileged/x`` is an option, not a host), anchored at the very end (``\\Z``: ``$`` would
let a trailing newline through)."""
QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?\Z")
# The trainer's recipes and models, by name; the trainer itself (which
# imports torch) is not loaded to validate a spec. tests/unit/test_spec.py checks
# these against the trainer's own argument parser.
RECIPES = ("fast", "seed")
MODELS = ("resnet-fast", "resnet18", "seed-cnn")


@dataclass
class TrainerOptions:
    """Options passed to ``python -m torchdeck.trainer``; None means the
    recipe's value."""

    recipe: str = "fast"
    """Hyper-parameter set: fast (default) or seed."""
    model: str | None = None
    """Network: resnet-fast, seed-cnn or resnet18 (default: the recipe's)."""
    epochs: int | None = None
    """Epochs to train (default: the recipe's)."""
    batch_size: int | None = None
    """Images per rank per step (default: the recipe's)."""
    max_steps: int | None = None
    """Stop after this many optimiser steps, job-wide."""
    dataset: str = "cifar10"
    """cifar10 from data_dir, or synthetic images of the same shape."""
    precision: str | None = None
    """auto, fp32, bf16 or fp16 (default: the recipe's)."""
    seed: int = 0
    """Random seed."""
    checkpoint_every: int = 0
    """Also snapshot every N optimiser steps (always at each epoch's end)."""
    keep_checkpoints: int = 3
    """Keep the newest K snapshots."""
    log_every: int = 1
    """Write a step metric line every N steps."""


@dataclass
class Resources:
    """What each worker (pod) asks the cluster for; ignored by the local backend."""

    cpu: str | None = None
    """CPU request per worker, a Kubernetes quantity such as "4" or "3500m"."""
    memory: str | None = None
    """Memory request per worker, e.g. "8Gi"."""
    gpus: int = 0
    """nvidia.com/gpu per worker."""
    shm_size: str = "1Gi"
    """Size of /dev/shm (a memory-backed volume in a pod)."""


JobKindName = Literal["pytorchjob", "trainjob", "mpijob", "job", "elasticjob"]
"""How a job is put on a cluster: Kubeflow PyTorchJob (default), Kubeflow
Trainer v2 TrainJob, MPIJob, a plain indexed Job (no operator needed), or
the legacy TorchElastic ElasticJob."""
KINDS: tuple[JobKindName, ...] = get_args(JobKindName)


@dataclass
class ClusterOptions:
    """How the job runs on a Kubernetes cluster; ignored by the local backend."""

    kind: JobKindName = "pytorchjob"
    """pytorchjob, trainjob, mpijob, job or elasticjob."""
    queue: str | None = None
    """Kueue's LocalQueue in the job's namespace to submit through (a shared cluster's quotas): the
    job is created suspended with the ``kueue.x-k8s.io/queue-name`` label, and Kueue starts it."""
    priority_class: str | None = None
    """Kueue's WorkloadPriorityClass for a queued job (the ``kueue.x-k8s.io/priority-class`` label):
    a higher one may preempt lower ones in its ClusterQueue, which resume from their checkpoints."""
    pvc: str | None = None
    """PersistentVolumeClaim holding the data and the checkpoints (EFS or FSx), mounted at mount_path."""
    mount_path: str = "/shared"
    """Where the claim is mounted in every pod."""
    data_dir: str = "/shared/data"
    """Folder holding cifar-10-batches-py/ inside the pods."""
    checkpoint_dir: str | None = None
    """Snapshots inside the pods (default: <mount_path>/runs/<job name>)."""
    service_account: str | None = None
    """Service account of the pods (an IRSA role for S3 on EKS)."""
    image_pull_policy: str | None = None
    """Always, IfNotPresent or Never (default: Kubernetes' own, IfNotPresent for a tagged image). Never
    runs only an image already on the node, as on kind or a node loaded by hand."""
    node_selector: dict[str, str] = field(default_factory=dict)
    """Node labels the pods must match, e.g. {eks.amazonaws.com/nodegroup: gpu}."""
    gpu_toleration: bool = True
    """Tolerate the nvidia.com/gpu taint GPU nodes carry (only when gpus > 0)."""
    min_nodes: int | None = None
    """Elastic: run with as few as this many nodes (set with max_nodes)."""
    max_nodes: int | None = None
    """Elastic: and as many as this."""
    restart_policy: str = "OnFailure"
    """OnFailure, or ExitCode (restart on retryable exit codes only)."""
    backoff_limit: int = 3
    """Pod restarts before the whole job is failed."""
    clean_pod_policy: str = "None"
    """Which pods to delete when the job ends: None (keep them for their logs), Running or All."""
    ttl_seconds_after_finished: int | None = 86400
    """Delete the finished job object after this long (None: keep it)."""
    runtime: str = "torch-distributed"
    """TrainJob only: the ClusterTrainingRuntime to run against."""
    code_bucket: str | None = None
    """Your code: where a code bundle too large for a ConfigMap goes, s3://BUCKET/PREFIX, which the
    pods' service account can read (eks: the cluster's model bucket when unset)."""


@dataclass
class Entrypoint:
    """What every rank runs: the built-in trainer (neither script nor module), a script or a module."""

    script: str | None = None
    """A Python script, relative to the code folder (torchrun's ``train.py``)."""
    module: str | None = None
    """A module to run with ``python -m`` from the code folder."""
    args: list[str] = field(default_factory=list)
    """The script's or module's own arguments."""
    code: str = "."
    """The code folder shipped with the job; relative paths are taken from the spec file's folder."""
    requirements: str | None = None
    """A requirements file in the code folder, installed before the ranks start (clusters)."""
    python: str | None = None
    """Local backend: the interpreter that runs the code (default: the active virtual environment's)."""
    in_image: str | None = None
    """Clusters: the folder in the image that holds the code (``torchdeck image build --code`` sets
    it): no bundle is sent, the pods run what the image holds."""
    workdir: str | None = None
    """The folder, within the code folder, that the ranks run in (None: the code folder itself).
    ``torchdeck train`` roots the code folder at the project a script is part of (a git root, a
    ``pyproject.toml`` or ``setup.py`` above it) and runs it from where you ran it."""


@dataclass
class MetricsOptions:
    """How torchdeck reads a user script's metrics from its output (``torchdeck.trainer.textmetrics``)."""

    pattern: str | None = None
    """A regular expression with named groups (loss, step, epoch, accuracy, ...) for lines the
    built-in formats do not know; it replaces them."""
    tags: dict[str, str] = field(default_factory=dict)
    """Which logger scalar (TensorBoard tag, CSV column, MLflow metric) is which, where its name does
    not say: ``{loss: train/objective, val_loss: holdout/objective, accuracy: holdout/top1}``."""


@dataclass
class JobSpec:
    """One distributed training job."""

    name: str = "cifar10"
    """Job name: lower-case letters, digits and '-', at most 40 characters."""
    nodes: int = 1
    """Machines (pods) taking part; the local backend runs one."""
    nproc_per_node: int = 2
    """Ranks (processes) per node."""
    max_restarts: int = 3
    """How many times torchrun restarts the workers after a failure."""
    device: str = "auto"
    """auto (CUDA where present), cpu or cuda."""
    data_dir: str = "data"
    """Folder holding cifar-10-batches-py/; relative paths are taken from the spec file's folder."""
    download: bool = False
    """Fetch the official CIFAR-10 archive into data_dir if it is absent."""
    checkpoint_dir: str | None = None
    """Where snapshots go (default: the run's own folder, or the shared volume on a cluster)."""
    model_file: str | None = None
    """Where the trained model goes: a path or s3://bucket/key (default: model.pt in checkpoint_dir)."""
    trainer: TrainerOptions = field(default_factory=TrainerOptions)
    """Options for the training program."""
    image: str | None = None
    """Training image for cluster backends (ignored locally)."""
    local_image: str | None = None
    """Local backend: run every rank inside this image on this machine's container engine, as the
    pods run them (``train --in-image IMAGE``; ``backends/local_in_image.py``)."""
    namespace: str = "default"
    """Kubernetes namespace for cluster backends."""
    resources: Resources = field(default_factory=Resources)
    """Per-worker resources for cluster backends."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for every rank."""
    cluster: ClusterOptions = field(default_factory=ClusterOptions)
    """How the job runs on a Kubernetes cluster."""
    entrypoint: Entrypoint = field(default_factory=Entrypoint)
    """What every rank runs (default: the built-in CIFAR-10 trainer)."""
    metrics: MetricsOptions = field(default_factory=MetricsOptions)
    """How a user script's metrics are read."""
    budget: float | None = None
    """The most this run may cost, in USD (``12.50``, ``"$12.50"``): past it the run is stopped, the
    built-in trainer with a checkpoint, and its reason says so (``backends/cost.py``)."""
    node_price_per_hour: float | None = None
    """What one node of this run costs an hour, where torchdeck's price table does not say or you pay
    another price: this machine on the local backend, every node on a cluster."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def builtin(self) -> bool:
        """Whether the ranks run torchdeck's own trainer (not a user script or module)."""
        return self.entrypoint.script is None and self.entrypoint.module is None

    def require_builtin(self, what: str) -> None:
        """A clear error where ``what`` (data prepare, the model test) meets the user's own code."""
        if not self.builtin:
            raise SpecError(
                "entrypoint",
                f"{what} is for the built-in CIFAR-10 trainer; this spec runs {self.program}",
                "your own script prepares its own data and tests its own model",
            )

    @property
    def program(self) -> str:
        """What the ranks run, in words: a script, ``-m module`` or the built-in trainer."""
        e = self.entrypoint
        return e.script or (f"-m {e.module}" if e.module else "the built-in trainer")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


Check = Callable[[object], "str | None"]
"""A field's check: why a value is wrong, or None."""


def _choices(*values: str | None) -> Check:
    def check(v: object) -> str | None:
        if v not in values:
            shown = ", ".join(x for x in values if x is not None)
            return f"must be one of {shown}, got {v!r}"
        return None

    return check


def _int_at_least(low: int, optional: bool = False) -> Check:
    def check(v: object) -> str | None:
        if v is None and optional:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            return f"must be an integer >= {low}, got {v!r}"
        return None

    return check


def _is_bool(v: object) -> str | None:
    return None if isinstance(v, bool) else f"must be true or false, got {v!r}"


def _path(optional: bool) -> Check:
    def check(v: object) -> str | None:
        if v is None and optional:
            return None
        if not isinstance(v, str) or not v.strip():
            return f"must be a path, got {v!r}"
        return None

    return check


def quantity_text(v: object) -> Any:
    """A number where a Kubernetes quantity goes (cpu: 90, memory: 1.5) as the quantity's text,
    as the API server takes it; anything else unchanged, for the check to judge."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    return str(v) if isinstance(v, int) or not v.is_integer() else str(int(v))


def _quantity(optional: bool) -> Check:
    def check(v: object) -> str | None:
        if v is None and optional:
            return None
        if not isinstance(v, str) or not QUANTITY_RE.match(v):
            return f'must be a Kubernetes quantity such as "4", "500m" or "8Gi", got {v!r}'
        return None

    return check


def _name(v: object) -> str | None:
    if not isinstance(v, str) or not NAME_RE.match(v):
        return f"must be 1-40 lower-case letters, digits or '-', starting and ending with a letter or digit, got {v!r}"
    return None


def _job_name(v: object) -> str | None:
    if not isinstance(v, str) or len(v) > MAX_JOB_NAME or not DNS_1035_RE.match(v):
        return (
            f"must be 1-40 lower-case letters, digits or '-', starting with a letter and ending with a "
            f"letter or digit (Kubernetes' DNS-1035 names), got {v!r:.60}"
        )
    return None


def _name_253(v: object) -> str | None:
    """A DNS subdomain name (RFC 1123): what Kubernetes takes for most object names."""
    if not isinstance(v, str) or len(v) > 253 or not DNS_SUBDOMAIN_RE.match(v):
        return (
            f"must be a DNS-1123 name (lower-case letters, digits, '-' and '.', starting and ending "
            f"with a letter or digit), got {v!r}"
        )
    return None


def _label_named(label: str) -> Callable[[object], str | None]:
    """An object's name that is also the value of ``label`` (63 characters at most)."""

    def check(v: object) -> str | None:
        problem = _name_253(v)
        if problem is None and isinstance(v, str) and len(v) > 63:
            return f"must be at most 63 characters (it becomes the {label} label), got {len(v)}"
        return problem

    return check


_queue_name = _label_named("kueue.x-k8s.io/queue-name")
"""A LocalQueue's name."""


def _image(v: object) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or not IMAGE_RE.match(v):
        return (
            f"must be an image reference such as registry/repo:tag or repo@sha256:<64 hex>, got {v!r} "
            f"(lower-case repository, no spaces or scheme)"
        )
    return None


def _env(v: object) -> str | None:
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        return 'must map names to string values (quote numbers: "1")'
    bad = [k for k in v if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", k)]
    return f"{bad[0]!r} is not a valid variable name" if bad else None


TRAINER_CHECKS = {
    "recipe": _choices(*RECIPES),
    "model": _choices(None, *MODELS),
    "epochs": _int_at_least(1, optional=True),
    "batch_size": _int_at_least(1, optional=True),
    "max_steps": _int_at_least(1, optional=True),
    "dataset": _choices("cifar10", "synthetic"),
    "precision": _choices(None, "auto", "fp32", "bf16", "fp16"),
    "seed": _int_at_least(0),
    "checkpoint_every": _int_at_least(0),
    "keep_checkpoints": _int_at_least(0),
    "log_every": _int_at_least(1),
}
QUANTITY_FIELDS = ("cpu", "memory", "shm_size")
RESOURCE_CHECKS = {
    "cpu": _quantity(optional=True),
    "memory": _quantity(optional=True),
    "gpus": _int_at_least(0),
    "shm_size": _quantity(optional=False),
}
MONEY_FIELDS = ("budget", "node_price_per_hour")
"""Amounts, read by ``cost.money`` (``"$12.50"`` is 12.5); None leaves them unset."""


def _money(positive: bool) -> Check:
    def check(v: object) -> str | None:
        if v is None:
            return None
        try:
            money(v, positive=positive)
        except ValueError as exc:
            return str(exc)
        return None

    return check


SPEC_CHECKS = {
    "name": _job_name,
    "nodes": _int_at_least(1),
    "nproc_per_node": _int_at_least(1),
    "max_restarts": _int_at_least(0),
    "device": _choices("auto", "cpu", "cuda"),
    "data_dir": _path(optional=False),
    "download": _is_bool,
    "checkpoint_dir": _path(optional=True),
    "model_file": _path(optional=True),
    "image": _image,
    "local_image": _image,
    "namespace": _name,
    "env": _env,
    "budget": _money(positive=True),
    "node_price_per_hour": _money(positive=False),
}


def _labels(v: object) -> str | None:
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        return "must map label names to string values"
    for key, value in v.items():
        if not LABEL_KEY_RE.match(key):
            return f"{key!r} is not a valid label name"
        if not LABEL_VALUE_RE.match(value):
            return f"{value!r} is not a valid label value (63 characters at most: letters, digits, '-', '_', '.')"
    return None


def _abs_path(v: object) -> str | None:
    return None if isinstance(v, str) and v.startswith("/") else f"must be an absolute path in the pod, got {v!r}"


def _s3_prefix(v: object) -> str | None:
    try:
        location = S3Url.parse(v)
    except ValueError:
        return f"must be s3://BUCKET or s3://BUCKET/PREFIX, got {v!r:.80}"
    try:
        check_bucket_name(location.bucket, "bucket")
        check_s3_prefix(location.key, "prefix", empty_ok=True)
    except SpecError as exc:
        return f"must be s3://BUCKET or s3://BUCKET/PREFIX: {exc.reason}"
    return None


def _optional(check: Check) -> Check:
    return lambda v: None if v is None else check(v)


CLUSTER_CHECKS = {
    "kind": _choices(*KINDS),
    "pvc": _optional(_name_253),
    "mount_path": _abs_path,
    "data_dir": _abs_path,
    "checkpoint_dir": _optional(_abs_path),
    "service_account": _optional(_name_253),
    "image_pull_policy": _optional(_choices("Always", "IfNotPresent", "Never")),
    "node_selector": _labels,
    "gpu_toleration": _is_bool,
    "min_nodes": _int_at_least(1, optional=True),
    "max_nodes": _int_at_least(1, optional=True),
    "restart_policy": _choices("OnFailure", "ExitCode"),
    "queue": _optional(_queue_name),
    "priority_class": _optional(_label_named("kueue.x-k8s.io/priority-class")),
    "backoff_limit": _int_at_least(0),
    "clean_pod_policy": _choices("None", "Running", "All"),
    "ttl_seconds_after_finished": _int_at_least(0, optional=True),
    "runtime": _name_253,
    "code_bucket": _optional(_s3_prefix),
}


def _relative_path(v: object) -> str | None:
    try:
        check_code_path(v, "")
    except SpecError as exc:
        return exc.reason
    return None


def _module(v: object) -> str | None:
    ok = isinstance(v, str) and all(part.isidentifier() for part in v.split("."))
    return None if ok else f"must be a dotted module name such as mypkg.train, got {v!r}"


def _arguments(v: object) -> str | None:
    if not isinstance(v, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in v):
        return "must be a list of arguments, e.g. [--lr, '0.1']"
    return None


def _pattern(v: object) -> str | None:
    from torchdeck.trainer.textmetrics import check_pattern

    return check_pattern(v)


ENTRYPOINT_CHECKS = {
    "script": _optional(_relative_path),
    "module": _optional(_module),
    "args": _arguments,
    "code": _path(optional=False),
    "requirements": _optional(_relative_path),
    "python": _path(optional=True),
    "in_image": _optional(_abs_path),
    "workdir": _optional(_relative_path),
}


def _metric_tags(v: object) -> str | None:
    from torchdeck.trainer.logfiles import ROLES

    if not isinstance(v, dict) or len(v) > len(ROLES):
        return f"must be a mapping of {', '.join(ROLES)} to a scalar's name"
    for role, name in v.items():
        if role not in ROLES:
            return f"{role!r:.40} is not one of {', '.join(ROLES)}"
        if not isinstance(name, str) or not 0 < len(name) <= 200 or not name.isprintable():
            return f"{role}: a scalar's name is 1-200 printable characters"
    return None


METRICS_CHECKS = {"pattern": _optional(_pattern), "tags": _metric_tags}
NESTED = {
    "trainer": (TrainerOptions, TRAINER_CHECKS),
    "resources": (Resources, RESOURCE_CHECKS),
    "cluster": (ClusterOptions, CLUSTER_CHECKS),
    "entrypoint": (Entrypoint, ENTRYPOINT_CHECKS),
    "metrics": (MetricsOptions, METRICS_CHECKS),
}


def _check_keys(data: Mapping[str, Any], known: list[str], prefix: str, source: str) -> None:
    for key in data:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {prefix}{close[0]}?" if close else f"known fields: {', '.join(known)}"
            raise SpecError(f"{prefix}{key}", "unknown field", hint, source)


def spec_from_dict(data: object, source: str = "") -> JobSpec:
    """Build and validate a JobSpec from parsed YAML; raises SpecError naming
    the first bad field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(
            "",
            f"a job spec is a mapping of fields, got {type(data).__name__}",
            "see the README's torchdeck.yaml example",
            source,
        )
    _check_keys(data, [f.name for f in dataclasses.fields(JobSpec)], "", source)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in NESTED:
            cls, checks = NESTED[key]
            if value is None:
                value = {}
            if not isinstance(value, dict):
                raise SpecError(key, f"must be a mapping, got {value!r}", "", source)
            if key == "cluster" and "node_selector" in value and value["node_selector"] is None:
                value = {**value, "node_selector": {}}
            _check_keys(value, list(checks), f"{key}.", source)
            if key == "resources":
                value = {k: quantity_text(v) if k in QUANTITY_FIELDS else v for k, v in value.items()}
            if key == "entrypoint" and value.get("args") is None:
                value = {**value, "args": []}
            for sub, subvalue in value.items():
                problem = checks[sub](subvalue)
                if problem:
                    raise SpecError(f"{key}.{sub}", problem, "", source)
            if key == "entrypoint":
                value = {**value, "args": [str(a) for a in value["args"]]}
            values[key] = cls(**value)
        else:
            if key == "env" and value is None:
                value = {}
            problem = SPEC_CHECKS[key](value)
            if problem:
                raise SpecError(key, problem, "", source)
            values[key] = money(value) if key in MONEY_FIELDS and value is not None else value
    spec = JobSpec(**values)
    _check_together(spec, source)
    return spec


def _check_together(spec: JobSpec, source: str) -> None:
    """Fields that are fine alone and wrong together."""
    if spec.entrypoint.script is not None and spec.entrypoint.module is not None:
        raise SpecError("entrypoint.module", "a job runs a script or a module, not both", "drop one of them", source)
    c = spec.cluster
    if (c.min_nodes is None) != (c.max_nodes is None):
        missing = "cluster.max_nodes" if c.max_nodes is None else "cluster.min_nodes"
        raise SpecError(
            missing,
            "must be set with the other one (elastic jobs need both bounds)",
            "set both cluster.min_nodes and cluster.max_nodes, or neither",
            source,
        )
    if c.min_nodes is not None and c.max_nodes is not None:
        if c.min_nodes > c.max_nodes:
            raise SpecError(
                "cluster.min_nodes",
                f"{c.min_nodes} is more than cluster.max_nodes ({c.max_nodes})",
                "min_nodes <= nodes <= max_nodes",
                source,
            )
        if not c.min_nodes <= spec.nodes <= c.max_nodes:
            raise SpecError(
                "nodes",
                f"{spec.nodes} is outside cluster.min_nodes..max_nodes ({c.min_nodes}..{c.max_nodes})",
                "min_nodes <= nodes <= max_nodes",
                source,
            )
    if spec.resources.gpus and spec.device == "cpu":
        raise SpecError(
            "resources.gpus",
            f"{spec.resources.gpus} GPU(s) asked for with device: cpu",
            "set device: cuda (or auto), or resources.gpus: 0",
            source,
        )
    check_kind_fields(spec, c.kind, source)


def check_kind_fields(spec: JobSpec, kind: JobKindName, source: str = "") -> None:
    """Fields that ``kind`` cannot carry out: refused rather than dropped without a word."""
    c = spec.cluster
    if kind in ("trainjob", "mpijob") and c.min_nodes is not None:
        name = {"trainjob": "a TrainJob", "mpijob": "an MPIJob"}[kind]
        raise SpecError(
            "cluster.min_nodes",
            f"{name} has no elastic bounds",
            "use kind pytorchjob (or job) for an elastic job, or drop cluster.min_nodes/max_nodes",
            source,
        )
    if c.priority_class and not c.queue:
        raise SpecError(
            "cluster.priority_class",
            "a priority class is Kueue's, and the job is not submitted through a queue",
            "add --queue LOCALQUEUE, or drop cluster.priority_class",
            source,
        )
    if kind == "elasticjob" and c.queue:
        raise SpecError(
            "cluster.queue",
            "Kueue does not queue an ElasticJob (its controller, pytorch/elastic, was archived in 2023)",
            "submit a pytorchjob (cluster.min_nodes/max_nodes make it elastic) or a trainjob through the queue",
            source,
        )
    if kind == "mpijob" and c.restart_policy == "ExitCode":
        raise SpecError(
            "cluster.restart_policy",
            "the MPI Operator takes Never or OnFailure, not ExitCode",
            "set cluster.restart_policy: OnFailure",
            source,
        )


def validate(spec: JobSpec) -> JobSpec:
    """Re-check a spec built or changed in code (a form, CLI overrides)."""
    return spec_from_dict(spec.to_dict())


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate a spec file. Relative data, checkpoint and model
    paths are resolved against the file's folder."""
    path = Path(path)
    try:
        data = load_yaml(path, hint="a job spec is a YAML file: torchdeck init writes one")
    except FileNotFoundError:
        raise SpecError("", "no such file", "write one with `torchdeck init`", str(path)) from None
    spec = spec_from_dict(data, str(path))
    return resolve_paths(spec, path.parent)


def resolve_paths(spec: JobSpec, base: Path) -> JobSpec:
    """Make local relative paths absolute against ``base``; s3:// stays as is."""

    def fix(value: str | None) -> str | None:
        if value is None or "://" in value or Path(value).expanduser().is_absolute():
            return str(Path(value).expanduser()) if value and "://" not in value else value
        return str((base / value).resolve())

    return dataclasses.replace(
        spec,
        entrypoint=dataclasses.replace(spec.entrypoint, code=fix(spec.entrypoint.code) or spec.entrypoint.code),
        data_dir=fix(spec.data_dir) or spec.data_dir,
        checkpoint_dir=fix(spec.checkpoint_dir),
        model_file=fix(spec.model_file),
    )


def update_spec_file(path: str | Path, changes: Mapping[str, Any]) -> JobSpec:
    """Set ``changes`` (dotted fields) in the spec file at ``path``, keeping the rest as written
    (relative paths stay relative to the file), or write the defaults with them where there is no
    file; returns the spec as saved. The one way torchdeck edits a user's spec (the image it
    built, the storage it made): two copies had drifted, one turning relative paths absolute."""
    path = Path(path)
    try:
        spec = spec_from_dict(load_yaml(path, hint="a job spec is a YAML file: torchdeck init writes one"), str(path))
    except FileNotFoundError:
        spec = JobSpec()
    spec = with_overrides(spec, changes)
    save_spec(spec, path)
    return spec


def save_spec(spec: JobSpec, path: str | Path, *, replace: bool = True) -> None:
    """Write a spec as YAML (validated first, so a bad spec never reaches disk); ``replace=False``:
    only where nothing is at ``path`` yet (FileExistsError), a dangling link included."""
    validate(spec)
    replace_text(Path(path), spec.to_yaml(), replace=replace)


def parse_override(text: str) -> tuple[str, Any]:
    """``trainer.epochs=5`` -> ("trainer.epochs", 5): values are read as YAML
    scalars, so numbers and booleans get their types."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise SpecError("", f"--set {text!r}: expected FIELD=VALUE", "e.g. --set trainer.seed=3")
    try:
        value = parse_yaml(raw, "--set") if raw.strip() else None
    except SpecError:  # not a YAML scalar: the text itself, for the field's check to judge
        value = raw
    return key.strip(), value


def with_overrides(spec: JobSpec, overrides: Mapping[str, Any]) -> JobSpec:
    """A copy of ``spec`` with dotted-field overrides applied and validated."""
    data = spec.to_dict()
    for key, value in overrides.items():
        target = data
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(target.get(part), dict):
                raise SpecError(key, "unknown field", "nested fields are trainer.* and resources.*")
            target = target[part]
        target[parts[-1]] = value
    return spec_from_dict(data, "command line")


def trainer_arguments(spec: JobSpec, data_dir: str, checkpoint_dir: str, metrics_file: str | None = None) -> list[str]:
    """The ``python -m torchdeck.trainer`` arguments for this spec, with the
    paths as the ranks will see them (a run folder here, a volume in a pod)."""
    t = spec.trainer
    args = [
        "--data-dir",
        data_dir,
        "--dataset",
        t.dataset,
        "--recipe",
        t.recipe,
        "--checkpoint-dir",
        checkpoint_dir,
        "--device",
        spec.device,
        "--seed",
        str(t.seed),
        "--checkpoint-every",
        str(t.checkpoint_every),
        "--keep-checkpoints",
        str(t.keep_checkpoints),
        "--log-every",
        str(t.log_every),
    ]
    if metrics_file:
        args += ["--metrics-file", metrics_file]
    for flag, value in (
        ("--model", t.model),
        ("--epochs", t.epochs),
        ("--batch-size", t.batch_size),
        ("--max-steps", t.max_steps),
        ("--precision", t.precision),
        ("--model-file", spec.model_file),
    ):
        if value is not None:
            args += [flag, str(value)]
    if spec.download:
        args.append("--download")
    return args
