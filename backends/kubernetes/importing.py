"""``torchdeck import FILE``: an existing manifest (a PyTorchJob, ElasticJob,
MPIJob or indexed Job, as the EKS workshops and the operators' examples
write them) read into a job spec, with a line for everything it could not
carry over.

What is read: the image; the command and args (torchrun's or
``torch.distributed.launch``'s flags, ``python script.py`` or ``python -m
module``, inside ``sh -c`` too, after ``mpirun``'s options); replicas,
elastic bounds and nproc per node; resources; the first claim and where it
is mounted; a memory-backed /dev/shm; node selector, GPU toleration and
service account; plain environment variables; backoff limit, clean-pod
policy and TTL. The script stays in the image (``entrypoint.in_image``) where
its path there is known."""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field

from ..bundle import RELAY_DIR
from ..errors import SpecError
from ..files import parse_yaml
from ..spec import JobKindName, JobSpec, spec_from_dict
from ..spec_options import LOADER_ENV, MAX_JOB_NAME, reserved_env
from . import crds
from .kind_objects import Container, Json, PodTemplate, at, avoided_nodes, whole
from .kinds import CONTAINERS, JobKind, importable_kind
from .manifests import LOST_NODE_TAINTS, NODE_NAME_ENV, QUEUE_LABEL

TORCHRUN_VALUED = {
    "nnodes", "nproc_per_node", "node_rank", "master_addr", "master_port", "rdzv_backend", "rdzv_endpoint",
    "rdzv_id", "rdzv_conf", "max_restarts", "monitor_interval", "start_method", "role", "log_dir", "redirects",
    "tee", "local_addr", "logs_specs", "local_ranks_filter", "rdzv_timeout", "numa_binding",
}  # fmt: skip
"""torchrun's options that take a value (names with '_'; torchrun takes '-' too)."""
TORCHRUN_FLAGS = {"standalone", "no_python", "run_path", "use_env", "module"}
LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch", "torchelastic.distributed.launch")
MPIRUN_VALUED = {"-n", "-np", "--np", "-c", "--map-by", "--bind-to", "-x", "--hostfile", "-H", "--host", "-wdir",
                 "--wdir", "--mca", "-mca", "--rank-by", "-N", "--npernode"}  # fmt: skip


@dataclass
class Imported:
    """The spec read from a manifest, and what did not come along (one line each)."""

    spec: JobSpec
    kind: JobKindName
    notes: list[str] = field(default_factory=list)


def _check_shape(job: Json, kind: JobKind, source: str) -> None:
    """A manifest from elsewhere is untrusted: its types are checked against the operator's CRD (the
    kind's, for the API version it names: ``JobKind.crd_for_import``) before anything reads it (a
    list where a mapping goes was a traceback). Fields the CRD does not know are left to the
    reader's notes."""
    version = str(job.get("apiVersion", "")).rpartition("/")[2]
    file = kind.crd_for_import(version)
    if file is None:
        return
    schema = crds.schema_of(crds.crd(file), version)
    if schema is None:
        return
    problems = [p for p in crds.check(job, schema).problems if "unknown field" not in p]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SpecError(
            "",
            f"is not a valid {job.get('kind')} {version}: {problems[0][:300]}{more}",
            "fix the manifest, then import it again",
            source,
        )


def import_manifest(text: str, source: str = "") -> Imported:
    """The job spec for the first training job in ``text`` (YAML, one or more documents)."""
    documents = [d for d in parse_yaml(text, source, all_documents=True) if d]
    jobs = [d for d in documents if isinstance(d, dict) and importable_kind(d.get("kind"))]
    if not jobs:
        found = ", ".join(sorted({str(d.get("kind")) for d in documents if isinstance(d, dict)})) or "nothing"
        raise SpecError("", f"holds no PyTorchJob, ElasticJob, MPIJob or Job (found {found})", "", source)
    job = jobs[0]
    notes = [f"{d.get('kind')} {at(d, ('metadata', 'name')) or ''}: not imported (torchdeck makes what "
             "a job needs)" for d in documents if d is not job]  # fmt: skip
    return import_job(job, source, notes)


def import_job(job: Json, source: str, notes: list[str] | None = None) -> Imported:
    """The job spec for one job object (a manifest's, or one read from the cluster)."""
    notes = [] if notes is None else notes
    kind = importable_kind(job.get("kind"))
    if kind is None:
        raise SpecError("", f"is a {job.get('kind')}, which torchdeck does not import", "", source)
    _check_shape(job, kind, source)
    reader = _Reader(job, kind, source, notes)
    try:
        data = reader.read()
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
        # a shape no CRD here describes (an indexed Job, another release): still one line
        what = type(exc).__name__ if not str(exc) else str(exc).splitlines()[0][:200]
        raise SpecError(
            "",
            f"is not shaped like a {job.get('kind')}: {what}",
            "check it with kubectl apply --dry-run=server -f FILE",
            source,
        ) from None
    try:
        spec = spec_from_dict(data, source)
    except SpecError as exc:
        raise SpecError(
            exc.field, f"{exc.reason} (as imported)", "edit the manifest, then import it again", source
        ) from None
    return Imported(spec, kind.key, notes)


def kubelet_expand(text: str, env: dict[str, str], unknown: set[str]) -> str:
    """``text`` as the kubelet passes it to a container: ``$$`` is ``$``, ``$(NAME)`` is NAME's value
    where ``env`` has it, and anything else stays (an unknown name is added to ``unknown``)."""
    if "$" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "$" and text[i + 1 : i + 2] == "$":
            out.append("$")
            i += 2
        elif c == "$" and text[i + 1 : i + 2] == "(" and (end := text.find(")", i + 2)) > 0:
            name = text[i + 2 : end]
            if name in env:
                out.append(env[name])
            else:
                unknown.add(name[:40])
                out.append(text[i : end + 1])
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _Reader:
    def __init__(self, job: Json, kind: JobKind, source: str, notes: list[str]):
        self.job, self.kind, self.source, self.notes = job, kind, source, notes
        self.where = f"{kind.kind}/{at(job, ('metadata', 'name')) or '?'}"
        self.data: dict[str, object] = {}
        self.cluster: dict[str, object] = {}
        self.resources: dict[str, object] = {}
        self.entry: dict[str, object] = {}

    def fail(self, problem: str, hint: str) -> SpecError:
        return SpecError("", f"{self.where}: {problem}", hint, self.source)

    # -- the job's shape ------------------------------------------------------------

    def read(self) -> dict[str, object]:
        """The spec's fields, as ``spec_from_dict`` takes them. What differs by kind (where its pod
        templates and size are) is its kind's to read (``JobKind.read_import``)."""
        job = self.kind.view(self.job)
        name = re.sub(r"[^a-z0-9-]+", "-", (job.name or "job").lower())
        self.data["name"] = re.sub(r"^[^a-z]+", "", name)[:MAX_JOB_NAME].strip("-") or "job"
        if job.namespace:
            self.data["namespace"] = job.namespace
        queue = job.labels.get(QUEUE_LABEL)
        if queue:  # submitted through Kueue: so is the job torchdeck makes of it
            self.cluster["queue"] = queue
        for key, target in (("backoffLimit", "backoff_limit"), ("cleanPodPolicy", "clean_pod_policy"),
                            ("ttlSecondsAfterFinished", "ttl_seconds_after_finished")):  # fmt: skip
            if job.run_policy.get(key) is not None:
                self.cluster[target] = job.run_policy[key]
        shape = self.kind.read_import(job)
        self.cluster.update(shape.cluster)
        if shape.nproc_per_node is not None:
            self.data["nproc_per_node"] = shape.nproc_per_node
        self.notes += shape.notes
        if shape.template is None or shape.program_template is None:
            raise self.fail("has no pod template", "is it a whole manifest, as kubectl apply takes it?")
        self.data["nodes"] = shape.nodes
        container = shape.template.container(CONTAINERS)
        self._program(shape.program_template.container(CONTAINERS), container)
        self._pod(shape.template, container)
        return {**self.data, "cluster": self.cluster, "resources": self.resources, "entrypoint": self.entry}

    # -- what the ranks run ---------------------------------------------------------

    def _program(self, runs: Container, container: Container) -> None:
        self.data["image"] = container.image or runs.image
        argv = [*runs.command, *runs.args]
        # the kubelet expanded $(NAME) in these; torchdeck's pods get arguments as written, so the
        # expansion is done here, once, as the kubelet would have done it
        env = {e.name: e.value for e in container.env if e.value is not None}
        unknown: set[str] = set()
        argv = [kubelet_expand(a, env, unknown) for a in argv]
        if unknown:
            self.notes.append(
                f"$({'), $('.join(sorted(unknown))}): not in the manifest's env, so kept as written (torchdeck "
                "passes arguments as written; nothing expands them in its pods)"
            )
        if not runs.command and self.kind.entrypoint_is_torchrun:
            argv = ["torchrun", *argv]  # the TorchElastic images' entrypoint is the launcher
            self.notes.append("command: none given; read as the image's entrypoint, torchrun")
        if len(argv) >= 3 and posixpath.basename(argv[0]) in ("sh", "bash") and argv[1] in ("-c", "-lc", "-ec"):
            argv = shlex.split(argv[2].split("&&")[-1].split(";")[-1])
            self.notes.append(
                "command: a shell line, read as words: its other commands left out, and its $VARIABLES kept as "
                "written (torchdeck runs no shell, so nothing expands them)"
            )
        entry = self.entry
        found = self._launcher_args(argv)
        if found is None:
            shown = " ".join(argv)[:80] or "nothing"
            raise self.fail(
                f"runs {shown!r}, not a Python program or torchrun",
                "torchdeck imports PyTorch training jobs; write a spec with torchdeck init --script",
            )
        module, rest = found
        if module:
            entry["module"], entry["args"] = rest[0], rest[1:]
        else:
            script, entry["args"] = rest[0], rest[1:]
            workdir = container.working_dir or runs.working_dir
            if script.startswith("/"):
                entry["in_image"], entry["script"] = posixpath.dirname(script) or "/", posixpath.basename(script)
            elif workdir:
                full = posixpath.normpath(posixpath.join(workdir, script))
                entry["in_image"], entry["script"] = posixpath.dirname(full), posixpath.basename(full)
            else:
                entry["script"] = script
                self.notes.append(
                    f"{script}: relative to the image's working directory, which the manifest does not say; "
                    "torchdeck ships this folder's copy (set entrypoint.in_image to run the image's)"
                )
        if entry.get("in_image"):
            self.notes.append(
                f"the code stays in the image at {entry['in_image']} (entrypoint.in_image); to ship a folder "
                "from here instead, drop in_image and set entrypoint.code"
            )
        elif module:
            self.notes.append(
                "the module is imported from the image's Python path (set entrypoint.in_image to its folder)"
            )

    def _launcher_args(self, argv: list[str]) -> tuple[bool, list[str]] | None:
        """(whether it is a module, [script or module, its args...]) after torchrun and its flags."""
        i = 0
        if argv and posixpath.basename(argv[0]) == "mpirun":
            i = 1
            while i < len(argv) and argv[i].startswith("-"):
                i += 2 if argv[i] in MPIRUN_VALUED else 1
        while i < len(argv) and (argv[i] == "env" or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[i])):
            i += 1
        if i >= len(argv):
            return None
        head = posixpath.basename(argv[i])
        if head == "torchrun":
            return self._torchrun(argv[i + 1 :])
        if re.match(r"^python[0-9.]*\Z", head):
            j = i + 1
            while j < len(argv) and argv[j] in ("-u", "-B", "-O", "-W", "-X"):
                j += 2 if argv[j] in ("-W", "-X") else 1
            if j + 1 < len(argv) and argv[j] == "-m" and argv[j + 1] in LAUNCHERS:
                return self._torchrun(argv[j + 2 :])
            if j + 1 < len(argv) and argv[j] == "-m":
                self._no_torchrun()
                return True, argv[j + 1 :]
            if j < len(argv):
                self._no_torchrun()
                return False, argv[j:]
        return None

    def _no_torchrun(self) -> None:
        self.data.setdefault("nproc_per_node", 1)  # a process per pod, as it ran
        self.notes.append(
            "the manifest runs python without torchrun; torchdeck runs it under torchrun "
            "(the operator's MASTER_ADDR/RANK variables come from torchrun there)"
        )

    def _torchrun(self, argv: list[str]) -> tuple[bool, list[str]] | None:
        module, i, found = False, 0, {}
        while i < len(argv) and argv[i].startswith("-"):
            flag = argv[i].lstrip("-")
            name, eq, value = flag.partition("=")
            name = name.replace("-", "_")
            if name in ("m", "module"):
                module, i = True, i + 1
                continue
            if name in TORCHRUN_FLAGS:
                i += 1
                continue
            if name not in TORCHRUN_VALUED:
                self.notes.append(f"torchrun option --{name}: not known to torchdeck, left out")
                i += 1
                continue
            if not eq:
                value, i = (argv[i + 1] if i + 1 < len(argv) else ""), i + 1
            found[name] = value
            i += 1
        if i >= len(argv):
            return None
        nproc = found.pop("nproc_per_node", "1" if "nproc_per_node" not in self.data else None)  # torchrun's default
        if nproc is not None:
            if nproc.isdigit():
                self.data["nproc_per_node"] = int(nproc)
            else:
                self.notes.append(f"--nproc-per-node {nproc}: torchdeck needs a number; set nproc_per_node")
        restarts = found.pop("max_restarts", None)
        if restarts is not None and restarts.isdigit():
            self.data["max_restarts"] = int(restarts)
        nnodes = found.pop("nnodes", None)
        if nnodes and ":" in nnodes and "min_nodes" not in self.cluster:
            low, _, high = nnodes.partition(":")
            if low.isdigit() and high.isdigit():
                self.cluster["min_nodes"], self.cluster["max_nodes"] = int(low), int(high)
        dropped = sorted(k for k in found if k.startswith(("rdzv", "master", "node_rank")))
        if dropped:
            self.notes.append(
                f"torchrun's {', '.join('--' + k.replace('_', '-') for k in dropped)}: torchdeck sets its own "
                "rendezvous (c10d on the first pod)"
            )
        others = sorted(k for k in found if k not in dropped)
        if others:
            self.notes.append(f"torchrun's {', '.join('--' + k.replace('_', '-') for k in others)}: left out")
        rest = argv[i:]
        if not module and rest[0].endswith(f"/{RELAY_DIR}/relay.py") and len(rest) > 1:
            rest = rest[1:]  # torchdeck's relay runs the program that follows it
            if rest[0] == "-m" and len(rest) > 1:
                return True, rest[1:]
        return module, rest

    # -- where and with what it runs ------------------------------------------------

    def _pod(self, pod: PodTemplate, container: Container) -> None:
        cluster, resources = self.cluster, self.resources
        requests, limits = container.requests, container.limits
        for key in ("cpu", "memory"):
            value = requests.get(key, limits.get(key))
            if value is not None:
                resources[key] = str(value)
        gpus = limits.get("nvidia.com/gpu", requests.get("nvidia.com/gpu"))
        if gpus is not None:
            resources["gpus"] = whole(gpus, 0)
        if pod.service_account:
            cluster["service_account"] = pod.service_account
        if container.image_pull_policy in ("Always", "IfNotPresent", "Never"):
            cluster["image_pull_policy"] = container.image_pull_policy
        if pod.node_selector:
            cluster["node_selector"] = {str(k): str(v) for k, v in pod.node_selector.items()}
        lost = {pod.toleration_seconds.get(key) for key in LOST_NODE_TAINTS}
        if len(lost) == 1 and None not in lost and (seconds := lost.pop()) is not None and seconds >= 0:
            cluster["node_loss"] = seconds  # how long its pods stay on a lost node, as torchdeck renders it
        for taint in pod.tolerations:
            if taint != "nvidia.com/gpu" and not (taint in LOST_NODE_TAINTS and "node_loss" in cluster):
                self.notes.append(f"toleration {taint}: left out (torchdeck tolerates the GPU taint and, as "
                                  "cluster.node_loss, a lost node's two taints for the same seconds)")  # fmt: skip
        if pod.affinity:
            avoided = avoided_nodes(pod.affinity)
            if avoided is not None:
                cluster["avoid_nodes"] = avoided
            else:
                self.notes.append("affinity: left out (use cluster.node_selector, or cluster.avoid_nodes)")
        self._env(container)
        self._volumes(pod, container)

    def _env(self, container: Container) -> None:
        env: dict[str, str] = {}
        unknown: set[str] = set()
        for e in container.env:
            if e.name == NODE_NAME_ENV:
                continue  # what torchdeck's own pods carry: rendered again
            if reserved_env(e.name):
                self.notes.append(f"env {e.name}: torchdeck's or Kubeflow Trainer's own name; left out")
            elif e.value is not None and re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", e.name):
                env[e.name] = kubelet_expand(e.value, env, unknown)  # earlier names, as the kubelet
                if e.name in LOADER_ENV:
                    self.notes.append(
                        f"env {e.name}: kept; it changes what code every rank loads (read it before you run this)"
                    )
            else:
                self.notes.append(f"env {e.name}: from a ConfigMap, Secret or field; left out")
        if unknown:
            self.notes.append(f"env: $({'), $('.join(sorted(unknown))}) kept as written (not set before it)")
        if env:
            self.data["env"] = env

    def _volumes(self, pod: PodTemplate, container: Container) -> None:
        claimed = False
        for volume in pod.volumes:
            path = container.mounts.get(volume.name) or None
            if path == "/dev/shm" and volume.in_memory:
                if volume.size_limit:
                    self.resources["shm_size"] = volume.size_limit
            elif volume.claim is not None and not claimed and path:
                self.cluster["pvc"], self.cluster["mount_path"] = volume.claim, path
                self.cluster["data_dir"] = posixpath.join(path, "data")
                claimed = True
            else:
                self.notes.append(f"volume {volume.name} ({volume.source}{' at ' + path if path else ''}): left out")
