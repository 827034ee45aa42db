"""``JobSpec``: one training job, described the same way on a laptop and on
EKS, and its YAML file (``torchdeck.yaml`` by default).

Loading validates every field and names the bad one
(``torchdeck.yaml: trainer.epochs: must be an integer >= 1, got 'ten'``);
unknown keys are errors with a "did you mean" hint, so a typo never silently
falls back to a default.

Each field is declared once: its type, default, ``Option`` (label, help, example, choices, check,
flag: ``spec_options.py``) and docstring side by side. Adding a field is that one declaration;
the checks, the command line's flags, the launch form and ``init``'s template follow from it
(``spec_options()``). Reading and writing the file is ``files.py``."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from ..trainer import options as trainer_options
from .cost import money
from .errors import SpecError
from .files import load_yaml, parse_yaml, replace_text
from .spec_options import (
    Option,
    Widget,
    abs_path,
    arguments_check,
    as_arguments,
    choices,
    env_check,
    image_check,
    int_at_least,
    is_bool,
    job_name,
    label_named,
    labels_check,
    metric_tags,
    module_check,
    money_check,
    name_253,
    name_check,
    node_names_check,
    option,
    optional_check,
    path_check,
    pattern_check,
    quantity_check,
    quantity_text,
    queue_name,
    relative_path,
    run_id_check,
    s3_prefix,
    trainer_field,
    widget_of,
)

DEFAULT_SPEC_FILE = "torchdeck.yaml"


@dataclass
class TrainerOptions:
    """Options passed to ``python -m torchdeck.trainer``; None means the recipe's value. Their
    defaults, choices, checks and help are the trainer's own (``trainer/options.py``); what is
    here is how the form and the command line show them."""

    recipe: str = trainer_field(trainer_options.RECIPE, label="Recipe", flag="--recipe")
    """Hyper-parameter set: fast (default) or seed."""
    model: str | None = trainer_field(trainer_options.MODEL, label="Model", example="the recipe's", flag="--model")
    """Network: resnet-fast, seed-cnn or resnet18 (default: the recipe's)."""
    epochs: int | None = trainer_field(
        trainer_options.EPOCHS, label="Epochs", example="empty: the recipe's", flag="--epochs"
    )
    """Epochs to train (default: the recipe's)."""
    batch_size: int | None = trainer_field(trainer_options.BATCH_SIZE, flag="--batch-size")
    """Images per rank per step (default: the recipe's)."""
    max_steps: int | None = trainer_field(
        trainer_options.MAX_STEPS, label="Max steps", example="empty: no limit", flag="--max-steps"
    )
    """Stop after this many optimiser steps, job-wide."""
    dataset: str = trainer_field(trainer_options.DATASET)
    """cifar10 from data_dir, or synthetic images of the same shape."""
    precision: str | None = trainer_field(trainer_options.PRECISION)
    """auto, fp32, bf16 or fp16 (default: the recipe's)."""
    seed: int = trainer_field(trainer_options.SEED)
    """Random seed."""
    checkpoint_every: int = trainer_field(trainer_options.CHECKPOINT_EVERY)
    """Also snapshot every N optimiser steps (always at each epoch's end)."""
    keep_checkpoints: int = trainer_field(trainer_options.KEEP_CHECKPOINTS)
    """Keep the newest K snapshots."""
    log_every: int = trainer_field(trainer_options.LOG_EVERY)
    """Write a step metric line every N steps."""


@dataclass
class Resources:
    """What each worker (pod) asks the cluster for; ignored by the local backend."""

    cpu: str | None = option(
        None,
        check=quantity_check(optional=True),
        help="CPU request per worker",
        label="CPU per worker",
        example="4 or 3500m (empty: none)",
        where="cluster",
        coerce=quantity_text,
    )
    """CPU request per worker, a Kubernetes quantity such as "4" or "3500m"."""
    memory: str | None = option(
        None,
        check=quantity_check(optional=True),
        help="memory request per worker",
        label="Memory per worker",
        example="8Gi (empty: none)",
        where="cluster",
        coerce=quantity_text,
    )
    """Memory request per worker, e.g. "8Gi"."""
    gpus: int = option(
        0,
        check=int_at_least(0),
        help="GPUs per worker",
        label="GPUs per worker",
        example="0",
        flag="--gpus",
        where="cluster",
    )
    """nvidia.com/gpu per worker."""
    efa: int = option(
        0,
        check=int_at_least(0),
        help="EFA interfaces per worker (vpc.amazonaws.com/efa; an EFA nodegroup on EKS)",
        where="cluster",
    )
    """vpc.amazonaws.com/efa per worker: the Elastic Fabric Adapter interfaces NCCL uses between
    nodes (the health gate checks that each pod sees them; without, NCCL falls back to TCP)."""
    shm_size: str = option(
        "1Gi", check=quantity_check(optional=False), help="size of /dev/shm", where="cluster", coerce=quantity_text
    )
    """Size of /dev/shm (a memory-backed volume in a pod)."""


JobKindName = Literal["pytorchjob", "trainjob", "mpijob", "job", "elasticjob"]
"""How a job is put on a cluster: Kubeflow PyTorchJob (default), Kubeflow
Trainer v2 TrainJob, MPIJob, a plain indexed Job (no operator needed), or
the legacy TorchElastic ElasticJob."""
KINDS: tuple[JobKindName, ...] = get_args(JobKindName)


@dataclass
class ClusterOptions:
    """How the job runs on a Kubernetes cluster; ignored by the local backend."""

    kind: JobKindName = option(
        "pytorchjob",
        **choices(*KINDS),
        help="cluster: how the job goes on the cluster: pytorchjob (default), trainjob, mpijob, job, or "
        "elasticjob (render-only; docs/KUBERNETES.md says which operator release each was run with)",
        label="Job kind",
        flag="--kind",
        where="cluster",
    )
    """pytorchjob, trainjob, mpijob, job or elasticjob."""
    queue: str | None = option(
        None,
        check=optional_check(queue_name),
        help="cluster: Kueue's LocalQueue to submit through (a shared cluster's quotas)",
        label="Kueue queue",
        example="empty: straight to the cluster",
        flag="--queue",
        where="cluster",
    )
    """Kueue's LocalQueue in the job's namespace to submit through (a shared cluster's quotas): the
    job is created suspended with the ``kueue.x-k8s.io/queue-name`` label, and Kueue starts it."""
    priority_class: str | None = option(
        None,
        check=optional_check(label_named("kueue.x-k8s.io/priority-class")),
        help="Kueue's WorkloadPriorityClass for a queued job",
        label="Queue priority",
        example="empty: the queue's default",
        where="cluster",
    )
    """Kueue's WorkloadPriorityClass for a queued job (the ``kueue.x-k8s.io/priority-class`` label):
    a higher one may preempt lower ones in its ClusterQueue, which resume from their checkpoints."""
    pvc: str | None = option(
        None,
        check=optional_check(name_253),
        help="the PersistentVolumeClaim with the data and checkpoints (torchdeck storage create makes one)",
        label="Shared volume",
        example="PVC name (empty: none)",
        where="cluster",
    )
    """PersistentVolumeClaim holding the data and the checkpoints (EFS or FSx), mounted at mount_path."""
    mount_path: str = option("/shared", check=abs_path, help="where the claim is mounted in every pod", where="cluster")
    """Where the claim is mounted in every pod."""
    data_dir: str = option(
        "/shared/data",
        check=abs_path,
        help="the folder holding cifar-10-batches-py/ in the pods",
        label="Data in the pods",
        example="/shared/data",
        where="cluster",
    )
    """Folder holding cifar-10-batches-py/ inside the pods."""
    checkpoint_dir: str | None = option(
        None, check=optional_check(abs_path), help="snapshots in the pods", where="cluster"
    )
    """Snapshots inside the pods (default: <mount_path>/runs/<job name>)."""
    service_account: str | None = option(
        None,
        check=optional_check(name_253),
        help="the pods' service account (an IRSA role for S3 on EKS)",
        label="Service account",
        example="empty: the namespace's default",
        where="cluster",
    )
    """Service account of the pods (an IRSA role for S3 on EKS)."""
    image_pull_policy: str | None = option(
        None,
        **choices("Always", "IfNotPresent", "Never", optional=True),
        help="when the node pulls the image (Never: only an image already on the node)",
        where="cluster",
    )
    """Always, IfNotPresent or Never (default: Kubernetes' own, IfNotPresent for a tagged image). Never
    runs only an image already on the node, as on kind or a node loaded by hand."""
    node_selector: dict[str, str] = option(
        factory=dict,
        check=labels_check,
        help="node labels the pods must match",
        label="Node selector",
        example="eks.amazonaws.com/nodegroup=gpu",
        where="cluster",
    )
    """Node labels the pods must match, e.g. {eks.amazonaws.com/nodegroup: gpu}."""
    avoid_nodes: list[str] = option(
        factory=list,
        check=node_names_check,
        help="nodes the pods must not run on (torchdeck resume --avoid-node sets it)",
        label="Avoid nodes",
        example="ip-10-0-1-7.ec2.internal",
        where="cluster",
    )
    """Nodes the pods must not be scheduled on, by name (a node affinity ``metadata.name NotIn``):
    what ``torchdeck resume RUN --avoid-node NODE`` adds after a run failed on a sick node."""
    health_gate: bool = option(
        False,
        check=is_bool,
        help="run the health gate on the nodes first and keep the run off those that fall short",
        label="Health gate first",
        flag="--check",
        where="cluster",
    )
    """Before the run, the health gate (``torchdeck check``) on the nodes the run would use, with
    its image, kind and node selection; the nodes that fall short are added to ``avoid_nodes``."""
    node_loss: int | None = option(
        None,
        check=int_at_least(0, optional=True),
        help="seconds a pod stays on a lost node before it is moved to a healthy one (none: Kubernetes' 300)",
        label="Node loss (s)",
        example="10",
        where="cluster",
    )
    """Recover from a lost node without a person: the pods tolerate a NotReady or unreachable node for
    this many seconds (``tolerationSeconds``; Kubernetes' default is 300), then the taint manager
    evicts them; they are marked safe to delete by force (Kueue's FailureRecoveryPolicy deletes a pod
    stuck on an unreachable node a minute after its grace period, where Kueue runs with that gate);
    the operator makes them again on a healthy node, and the trainer resumes from the newest
    checkpoint. None: Kubernetes' defaults, and a person resumes the run."""
    gpu_toleration: bool = option(True, check=is_bool, help="tolerate the nvidia.com/gpu taint", where="cluster")
    """Tolerate the nvidia.com/gpu taint GPU nodes carry (only when gpus > 0)."""
    min_nodes: int | None = option(
        None, check=int_at_least(1, optional=True), help="elastic: the fewest nodes", where="cluster"
    )
    """Elastic: run with as few as this many nodes (set with max_nodes)."""
    max_nodes: int | None = option(
        None, check=int_at_least(1, optional=True), help="elastic: the most nodes", where="cluster"
    )
    """Elastic: and as many as this."""
    restart_policy: str = option(
        "OnFailure", **choices("OnFailure", "ExitCode"), help="when a pod restarts", where="cluster"
    )
    """OnFailure, or ExitCode (restart on retryable exit codes only)."""
    backoff_limit: int = option(3, check=int_at_least(0), help="pod restarts before the job fails", where="cluster")
    """Pod restarts before the whole job is failed."""
    clean_pod_policy: str = option(
        "None", **choices("None", "Running", "All"), help="which pods go when the job ends", where="cluster"
    )
    """Which pods to delete when the job ends: None (keep them for their logs), Running or All."""
    ttl_seconds_after_finished: int | None = option(
        86400, check=int_at_least(0, optional=True), help="delete the finished job after this long", where="cluster"
    )
    """Delete the finished job object after this long (None: keep it)."""
    runtime: str = option(
        "torch-distributed", check=name_253, help="TrainJob: the ClusterTrainingRuntime", where="cluster"
    )
    """TrainJob only: the ClusterTrainingRuntime to run against."""
    code_bucket: str | None = option(
        None,
        check=optional_check(s3_prefix),
        help="where a code bundle too large for a ConfigMap goes (s3://BUCKET/PREFIX)",
        where="cluster",
    )
    """Your code: where a code bundle too large for a ConfigMap goes, s3://BUCKET/PREFIX, which the
    pods' service account can read (eks: the cluster's model bucket when unset)."""


@dataclass
class Entrypoint:
    """What every rank runs: the built-in trainer (neither script nor module), a script or a module."""

    script: str | None = option(
        None,
        check=optional_check(relative_path),
        help="your script, in the code folder (empty: the built-in CIFAR-10 trainer)",
        label="Script",
        example="train.py (empty: built-in trainer)",
    )
    """A Python script, relative to the code folder (torchrun's ``train.py``)."""
    module: str | None = option(
        None,
        check=optional_check(module_check),
        help="run python -m M on every rank (arguments for it after --)",
        label="or module",
        example="mypkg.train",
        flag="--module",
    )
    """A module to run with ``python -m`` from the code folder."""
    args: list[str] = option(
        factory=list,
        check=arguments_check,
        convert=as_arguments,
        help="its arguments, as on a command line",
        label="Arguments",
        example="--epochs 3 --lr 0.1",
    )
    """The script's or module's own arguments."""
    code: str = option(
        ".",
        check=path_check(optional=False),
        help="the code folder (shipped with the job to a cluster)",
        label="Code folder",
        example=".",
        local_path=True,
    )
    """The code folder shipped with the job; relative paths are taken from the spec file's folder."""
    requirements: str | None = option(
        None,
        check=optional_check(relative_path),
        help="a requirements file in the code folder, installed in the pods first",
        label="Requirements",
        example="requirements.txt (empty: none)",
        where="cluster",
    )
    """A requirements file in the code folder, installed before the ranks start (clusters)."""
    python: str | None = option(
        None,
        check=path_check(optional=True),
        help="local: the interpreter for your code (default: the active venv's)",
        flag="--python",
        where="local",
    )
    """Local backend: the interpreter that runs the code (default: the active virtual environment's)."""
    in_image: str | None = option(
        None,
        check=optional_check(abs_path),
        help="the folder in the image that holds the code (image build --code sets it)",
        where="cluster",
    )
    """Clusters: the folder in the image that holds the code (``torchdeck image build --code`` sets
    it): no bundle is sent, the pods run what the image holds."""
    workdir: str | None = option(
        None, check=optional_check(relative_path), help="the folder, within the code folder, the ranks run in"
    )
    """The folder, within the code folder, that the ranks run in (None: the code folder itself).
    ``torchdeck train`` roots the code folder at the project a script is part of (a git root, a
    ``pyproject.toml`` or ``setup.py`` above it) and runs it from where you ran it."""


@dataclass
class MetricsOptions:
    """How torchdeck reads a user script's metrics from its output (``torchdeck.trainer.textmetrics``)."""

    pattern: str | None = option(
        None,
        check=optional_check(pattern_check),
        help="a regex with (?P<loss>...) for your script's lines (empty: the common text formats)",
        label="Metrics pattern",
        example="empty: the common formats",
    )
    """A regular expression with named groups (loss, step, epoch, accuracy, ...) for lines the
    built-in formats do not know; it replaces them."""
    tags: dict[str, str] = option(
        factory=dict, check=metric_tags, help="which logger scalar is which (loss, val_loss, accuracy)"
    )
    """Which logger scalar (TensorBoard tag, CSV column, MLflow metric) is which, where its name does
    not say: ``{loss: train/objective, val_loss: holdout/objective, accuracy: holdout/top1}``."""


@dataclass
class JobSpec:
    """One distributed training job."""

    name: str = option(
        "cifar10",
        check=job_name,
        help="job name",
        label="Job name",
        example="cifar10-ddp",
        flag="--name",
    )
    """Job name: lower-case letters, digits and '-', at most 40 characters."""
    nodes: int = option(
        1,
        check=int_at_least(1),
        help="nodes (the local backend runs one)",
        label="Nodes",
        example="2",
        flag="--nodes",
        where="cluster",
    )
    """Machines (pods) taking part; the local backend runs one."""
    nproc_per_node: int = option(
        2,
        check=int_at_least(1),
        help="ranks on each node (one per GPU)",
        label="Ranks per node",
        example="2",
        flag="--nproc-per-node",
    )
    """Ranks (processes) per node."""
    max_restarts: int = option(
        3,
        check=int_at_least(0),
        help="restarts of a failed job before it fails",
        label="Max restarts",
        example="0",
        flag="--max-restarts",
    )
    """How many times torchrun restarts the workers after a failure."""
    device: str = trainer_field(trainer_options.DEVICE, label="Device", flag="--device")
    """auto (CUDA where present), cpu or cuda."""
    data_dir: str = option(
        "data",
        check=path_check(optional=False),
        help="folder holding cifar-10-batches-py/",
        label="Data folder",
        example="./data",
        flag="--data-dir",
        where="local",
        local_path=True,
    )
    """Folder holding cifar-10-batches-py/; relative paths are taken from the spec file's folder."""
    download: bool = trainer_field(
        trainer_options.DOWNLOAD, label="Download data", example="if absent", flag="--download"
    )
    """Fetch the official CIFAR-10 archive into data_dir if it is absent."""
    checkpoint_dir: str | None = option(
        None, check=path_check(optional=True), help="where snapshots go", flag="--checkpoint-dir", local_path=True
    )
    """Where snapshots go (default: the run's own folder, or the shared volume on a cluster)."""
    model_file: str | None = trainer_field(
        trainer_options.MODEL_FILE, check=path_check(optional=True), flag="--model-file", local_path=True
    )
    """Where the trained model goes: a path or s3://bucket/key (default: model.pt in checkpoint_dir)."""
    resumes: str | None = option(
        None,
        check=optional_check(run_id_check),
        help="the run this one continues from its newest checkpoint (torchdeck resume sets it)",
    )
    """The run this one continues (its lineage: ``torchdeck resume`` sets it, ``compare`` draws the
    runs as one line with their restarts)."""
    trainer: TrainerOptions = field(default_factory=TrainerOptions)
    """Options for the training program."""
    image: str | None = option(
        None,
        check=image_check,
        help="cluster: the training image (registry/repo:tag or @sha256:...)",
        label="Image",
        example="registry/repo:tag (image build makes one)",
        flag="--image",
        where="cluster",
    )
    """Training image for cluster backends (ignored locally)."""
    local_image: str | None = option(
        None,
        check=image_check,
        help="local: run every rank inside this image, as the pods do (Docker here)",
        label="Run in image",
        example="empty: on this machine",
        flag="--in-image",
        where="local",
    )
    """Local backend: run every rank inside this image on this machine's container engine, as the
    pods run them (``train --in-image IMAGE``; ``backends/local_in_image.py``)."""
    namespace: str = option(
        "default",
        check=name_check,
        help="cluster: the Kubernetes namespace",
        label="Namespace",
        example="default",
        flag="--namespace",
        where="cluster",
    )
    """Kubernetes namespace for cluster backends."""
    resources: Resources = field(default_factory=Resources)
    """Per-worker resources for cluster backends."""
    env: dict[str, str] = option(
        factory=dict,
        check=env_check,
        help="extra environment variables for every rank",
        label="Environment",
        example="NCCL_DEBUG=INFO",
    )
    """Extra environment variables for every rank."""
    cluster: ClusterOptions = field(default_factory=ClusterOptions)
    """How the job runs on a Kubernetes cluster."""
    entrypoint: Entrypoint = field(default_factory=Entrypoint)
    """What every rank runs (default: the built-in CIFAR-10 trainer)."""
    metrics: MetricsOptions = field(default_factory=MetricsOptions)
    """How a user script's metrics are read."""
    budget: float | None = option(
        None,
        check=money_check(positive=True),
        help="the most this run may cost, in USD (stopped past it)",
        label="Budget (USD)",
        example="empty: no limit",
        convert=money,
    )
    """The most this run may cost, in USD (``12.50``, ``"$12.50"``): past it the run is stopped, the
    built-in trainer with a checkpoint, and its reason says so (``backends/cost.py``)."""
    node_price_per_hour: float | None = option(
        None, check=money_check(positive=False), help="what one node costs an hour, in USD", convert=money
    )
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
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)


NESTED: dict[str, type] = {
    "trainer": TrainerOptions,
    "resources": Resources,
    "cluster": ClusterOptions,
    "entrypoint": Entrypoint,
    "metrics": MetricsOptions,
}
"""The spec's sections, each a dataclass of options of its own."""


@dataclass(frozen=True)
class SpecOption:
    """One field of the spec with its ``Option``: what the flag, the form and the template read."""

    path: str
    """Dotted, as ``--set`` and the form name it: ``trainer.epochs``."""
    option: Option
    widget: Widget
    default: Any
    optional: bool
    """None is a value it takes (empty in the form)."""

    @property
    def name(self) -> str:
        """The field's own name (``epochs``): the command line's ``dest`` for its flag."""
        return self.path.rpartition(".")[2]


def _options_of(cls: type, prefix: str) -> dict[str, SpecOption]:
    out: dict[str, SpecOption] = {}
    for f in dataclasses.fields(cls):
        opt = f.metadata.get("option")
        if opt is None:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        type_text = str(f.type)
        out[f.name] = SpecOption(prefix + f.name, opt, widget_of(opt, type_text), default, "None" in type_text)
    return out


OPTIONS: dict[str, dict[str, SpecOption]] = {
    "": _options_of(JobSpec, ""),
    **{section: _options_of(cls, section + ".") for section, cls in NESTED.items()},
}
"""Every option by section ("" for the top level), then by field name."""


def spec_options() -> Iterator[SpecOption]:
    """Every option of the spec, in the order the file lists them."""
    for name in (f.name for f in dataclasses.fields(JobSpec)):
        if name in NESTED:
            yield from OPTIONS[name].values()
        else:
            yield OPTIONS[""][name]


def option_at(path: str) -> SpecOption:
    """The option at a dotted path (KeyError where there is none)."""
    section, _, name = path.rpartition(".")
    return OPTIONS[section][name]


def _empty(opt: SpecOption, value: object) -> object:
    """A mapping or a list written as nothing (``env:``) is an empty one."""
    if value is None and opt.widget in ("map", "args"):
        return {} if opt.widget == "map" else []
    return value


def _read(opt: SpecOption, value: object, where: str, source: str) -> object:
    """One field's value through its option: coerced, checked (a SpecError naming it), converted."""
    o = opt.option
    if o.coerce is not None:
        value = o.coerce(value)
    problem = o.check(value)
    if problem:
        raise SpecError(where, problem, "", source)
    return o.convert(value) if o.convert is not None and value is not None else value


def _check_keys(data: Mapping[str, object], known: list[str], prefix: str, source: str) -> None:
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
            "docs/SPEC.md lists every field; torchdeck init writes them all",
            source,
        )
    _check_keys(data, [f.name for f in dataclasses.fields(JobSpec)], "", source)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in NESTED:
            if value is None:
                value = {}
            if not isinstance(value, dict):
                raise SpecError(key, f"must be a mapping, got {value!r}", "", source)
            section = OPTIONS[key]
            _check_keys(value, list(section), f"{key}.", source)
            read = {
                sub: _read(section[sub], _empty(section[sub], v), f"{key}.{sub}", source) for sub, v in value.items()
            }
            values[key] = NESTED[key](**read)
        else:
            top = OPTIONS[""][key]
            values[key] = _read(top, _empty(top, value), key, source)
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
    """Make local relative paths (the fields whose ``Option.local_path`` says so) absolute against
    ``base``, and ``~`` the home folder; s3:// stays as is."""
    for opt in spec_options():
        value = value_at(spec, opt.path)
        if opt.option.local_path and isinstance(value, str) and "://" not in value:
            path = Path(value).expanduser()
            spec = with_value(spec, opt.path, str(path if path.is_absolute() else (base / value).resolve()))
    return spec


def value_at(spec: JobSpec, path: str) -> object:
    """The value of the field at a dotted path (``trainer.epochs``)."""
    section, _, name = path.rpartition(".")
    return getattr(getattr(spec, section) if section else spec, name)


def with_value(spec: JobSpec, path: str, value: str) -> JobSpec:
    """A copy of ``spec`` with the field at a dotted path set, unchecked: for a value made from one
    already checked (a path made absolute); ``with_overrides`` checks what a person gave."""
    section, _, name = path.rpartition(".")
    change: dict[str, Any] = {name: value}  # a field named at run time: the type checker cannot follow it
    if not section:
        return dataclasses.replace(spec, **change)
    nested: dict[str, Any] = {section: dataclasses.replace(getattr(spec, section), **change)}
    return dataclasses.replace(spec, **nested)


def update_spec_file(path: str | Path, changes: Mapping[str, object]) -> JobSpec:
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
    """Write a spec as YAML (validated first, so a bad spec never reaches disk), each field with its
    help as a comment (``spec_template``); ``replace=False``: only where nothing is at ``path`` yet
    (FileExistsError), a dangling link included."""
    validate(spec)
    replace_text(Path(path), spec_template(spec), replace=replace)


def _flow(value: object) -> str:
    """A value on one line, as YAML reads it back (``[--lr, '0.1']``, ``{}``, ``null``)."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip()
    text = text.removesuffix("\n...").removesuffix("...").strip()
    if "\n" in text:  # a value that spans lines: double-quoted, its line breaks escaped
        text = yaml.safe_dump(value, default_flow_style=True, default_style='"', width=1 << 16).strip()
    return text


REFERENCE_BEGIN = "<!-- the fields: made from their declarations by `torchdeck init --reference`; a test checks it -->"
REFERENCE_END = "<!-- end of the fields -->"


def spec_reference() -> str:
    """Every field of the spec as a Markdown table (field, flag, where it applies, default, what it
    is): docs/SPEC.md holds it, made from the same declarations as the flags and the form."""
    where = {"all": "every backend", "local": "local", "cluster": "clusters"}
    rows = ["| field | flag | applies to | default | what it is |", "|---|---|---|---|---|"]
    for opt in spec_options():
        o = opt.option
        choices = f" ({', '.join(o.choices)})" if o.choices and "," not in o.help else ""
        text = (o.help + choices).replace("|", "\\|")
        flag = f"`{o.flag}`" if o.flag else ""
        rows.append(f"| `{opt.path}` | {flag} | {where[o.where]} | `{_flow(opt.default)}` | {text} |")
    return "\n".join([REFERENCE_BEGIN, *rows, REFERENCE_END])


def spec_template(spec: JobSpec) -> str:
    """The spec as YAML, every field on its own line with its option's help as a comment: the file
    ``init`` writes, made from the same declarations as the flags and the form."""
    data = spec.to_dict()
    lines = ["# A torchdeck job spec: `torchdeck train` runs it (docs/SPEC.md has every field)."]

    def line(indent: str, name: str, value: object, opt: SpecOption) -> str:
        where = {"local": "local: ", "cluster": "cluster: "}.get(opt.option.where, "")
        text = opt.option.help
        text = text if text.startswith(where.strip()) else where + text
        return f"{indent}{name}: {_flow(value)}  # {text}"

    for f in dataclasses.fields(JobSpec):
        if f.name in NESTED:
            lines.append(f"{f.name}:")
            lines += [line("  ", sub, data[f.name][sub], opt) for sub, opt in OPTIONS[f.name].items()]
        else:
            lines.append(line("", f.name, data[f.name], OPTIONS[""][f.name]))
    return "\n".join(lines) + "\n"


def parse_override(text: str) -> tuple[str, object]:
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


def with_overrides(spec: JobSpec, overrides: Mapping[str, object]) -> JobSpec:
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
    paths as the ranks will see them (a run folder here, a volume in a pod): every field that
    names a trainer option (``Option.trainer``), in the trainer's own order."""
    values = {opt.option.trainer: value_at(spec, opt.path) for opt in spec_options() if opt.option.trainer}
    paths = {"data_dir": data_dir, "checkpoint_dir": checkpoint_dir, "metrics_file": metrics_file}
    return trainer_options.command_line(values | paths)
