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
from typing import Any

from ..bundle import RELAY_DIR
from ..errors import SpecError
from ..files import parse_yaml
from ..spec import JobKindName, JobSpec, spec_from_dict
from ..spec_options import LOADER_ENV, MAX_JOB_NAME, reserved_env
from . import crds
from .manifests import NODE_NAME_ENV, QUEUE_LABEL

KINDS: dict[str, JobKindName] = {
    "PyTorchJob": "pytorchjob",
    "ElasticJob": "elasticjob",
    "MPIJob": "mpijob",
    "Job": "job",
}
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


# The operators' own CRDs (manifests/crds/) for the API versions a manifest from elsewhere may use.
IMPORT_CRDS = {
    ("PyTorchJob", "v1"): "pytorchjob-trainer-v1.9.4.yaml",
    ("MPIJob", "v1"): "mpijob-v1-trainer-v1.9.4.yaml",
    ("MPIJob", "v2beta1"): "mpijob-mpi-operator-v0.8.2.yaml",
    ("ElasticJob", "v1alpha1"): "elasticjob-elastic-v0.2.2.yaml",
}


def _check_shape(job: dict[str, Any], source: str) -> None:
    """A manifest from elsewhere is untrusted: its types are checked against the operator's CRD
    before anything reads it (a list where a mapping goes was a traceback). Fields the CRD does not
    know are left to the reader's notes."""
    version = str(job.get("apiVersion", "")).rpartition("/")[2]
    file = IMPORT_CRDS.get((str(job.get("kind")), version))
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
    jobs = [d for d in documents if isinstance(d, dict) and d.get("kind") in KINDS]
    if not jobs:
        found = ", ".join(sorted({str(d.get("kind")) for d in documents if isinstance(d, dict)})) or "nothing"
        raise SpecError("", f"holds no PyTorchJob, ElasticJob, MPIJob or Job (found {found})", "", source)
    job = jobs[0]
    notes = [f"{d.get('kind')} {(d.get('metadata') or {}).get('name', '')}: not imported (torchdeck makes what "
             "a job needs)" for d in documents if d is not job]  # fmt: skip
    return import_job(job, source, notes)


def import_job(job: dict[str, Any], source: str, notes: list[str] | None = None) -> Imported:
    """The job spec for one job object (a manifest's, or one read from the cluster)."""
    notes = [] if notes is None else notes
    if job.get("kind") not in KINDS:
        raise SpecError("", f"is a {job.get('kind')}, which torchdeck does not import", "", source)
    _check_shape(job, source)
    reader = _Reader(job, source, notes)
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
    return Imported(spec, KINDS[job["kind"]], notes)


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
    def __init__(self, job: dict[str, Any], source: str, notes: list[str]):
        self.job, self.source, self.notes = job, source, notes
        self.kind = job["kind"]
        self.where = f"{self.kind}/{(job.get('metadata') or {}).get('name', '?')}"
        self.data: dict[str, Any] = {"cluster": {}, "resources": {}, "entrypoint": {}}

    def fail(self, problem: str, hint: str) -> SpecError:
        return SpecError("", f"{self.where}: {problem}", hint, self.source)

    # -- the job's shape ------------------------------------------------------------

    def read(self) -> dict[str, Any]:
        meta, spec = self.job.get("metadata") or {}, self.job.get("spec") or {}
        name = re.sub(r"[^a-z0-9-]+", "-", str(meta.get("name", "job")).lower())
        self.data["name"] = re.sub(r"^[^a-z]+", "", name)[:MAX_JOB_NAME].strip("-") or "job"
        if meta.get("namespace"):
            self.data["namespace"] = meta["namespace"]
        cluster = self.data["cluster"]
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if queue:  # submitted through Kueue: so is the job torchdeck makes of it
            cluster["queue"] = queue
        run = spec.get("runPolicy") or spec.get("RunPolicy") or {}
        for key, target in (("backoffLimit", "backoff_limit"), ("cleanPodPolicy", "clean_pod_policy"),
                            ("ttlSecondsAfterFinished", "ttl_seconds_after_finished")):  # fmt: skip
            if run.get(key) is not None:
                cluster[target] = run[key]
        if self.kind == "PyTorchJob":
            roles = spec.get("pytorchReplicaSpecs") or {}
            template = (roles.get("Master") or roles.get("Worker") or {}).get("template")
            nodes = sum(int((r or {}).get("replicas", 1)) for r in roles.values())
            cluster["kind"] = "pytorchjob"
            elastic = spec.get("elasticPolicy") or {}
            if elastic.get("minReplicas") is not None and elastic.get("maxReplicas") is not None:
                cluster["min_nodes"], cluster["max_nodes"] = elastic["minReplicas"], elastic["maxReplicas"]
            if spec.get("nprocPerNode") not in (None, "auto", "gpu", "cpu"):
                self.data["nproc_per_node"] = int(spec["nprocPerNode"])
            program_template = template
        elif self.kind == "ElasticJob":
            worker = (spec.get("replicaSpecs") or {}).get("Worker") or {}
            template, nodes = worker.get("template"), int(worker.get("replicas", 1))
            cluster["kind"] = "pytorchjob"
            if spec.get("minReplicas") is not None and spec.get("maxReplicas") is not None:
                cluster["min_nodes"], cluster["max_nodes"] = spec["minReplicas"], spec["maxReplicas"]
                nodes = min(max(nodes, spec["minReplicas"]), spec["maxReplicas"])
            self.notes.append(
                "ElasticJob: written as an elastic PyTorchJob (the TorchElastic controller installs on no "
                "current cluster); set cluster.kind: elasticjob to keep it; its etcd rendezvous is torchdeck's own"
            )
            program_template = template
        elif self.kind == "MPIJob":
            roles = spec.get("mpiReplicaSpecs") or {}
            template = (roles.get("Worker") or {}).get("template")
            nodes = int((roles.get("Worker") or {}).get("replicas", 1))
            program_template = (roles.get("Launcher") or {}).get("template")
            cluster["kind"] = "mpijob"
            if spec.get("sshAuthMountPath"):
                self.notes.append(
                    f"sshAuthMountPath {spec['sshAuthMountPath']}: torchdeck mounts the keys in /home/trainer/.ssh"
                )
        else:
            if spec.get("completionMode") != "Indexed":
                self.notes.append("Job: not an indexed Job; torchdeck runs it as one (a pod per node)")
            template, nodes = spec.get("template"), int(spec.get("completions") or spec.get("parallelism") or 1)
            cluster["kind"] = "job"
            if spec.get("backoffLimit") is not None:
                cluster["backoff_limit"] = spec["backoffLimit"]
            program_template = template
        if not isinstance(template, dict) or not isinstance(program_template, dict):
            raise self.fail("has no pod template", "is it a whole manifest, as kubectl apply takes it?")
        self.data["nodes"] = nodes
        pod = template.get("spec") or {}
        container = self._container(pod)
        self._program(self._container(program_template.get("spec") or {}), container)
        self._pod(pod, container)
        return self.data

    @staticmethod
    def _container(pod: dict[str, Any]) -> dict[str, Any]:
        containers = pod.get("containers") or [{}]
        named = [c for c in containers if c.get("name") in ("pytorch", "elasticjob-worker", "trainer")]
        return (named or containers)[0]

    # -- what the ranks run ---------------------------------------------------------

    def _program(self, runs: dict[str, Any], container: dict[str, Any]) -> None:
        self.data["image"] = container.get("image") or runs.get("image")
        argv = [str(a) for a in (runs.get("command") or []) + (runs.get("args") or [])]
        # the kubelet expanded $(NAME) in these; torchdeck's pods get arguments as written, so the
        # expansion is done here, once, as the kubelet would have done it
        env = {str(e["name"]): str(e["value"]) for e in container.get("env") or []
               if isinstance(e, dict) and "name" in e and "value" in e}  # fmt: skip
        unknown: set[str] = set()
        argv = [kubelet_expand(a, env, unknown) for a in argv]
        if unknown:
            self.notes.append(
                f"$({'), $('.join(sorted(unknown))}): not in the manifest's env, so kept as written (torchdeck "
                "passes arguments as written; nothing expands them in its pods)"
            )
        if not runs.get("command") and self.kind == "ElasticJob":
            argv = ["torchrun", *argv]  # the TorchElastic images' entrypoint is the launcher
            self.notes.append("command: none given; read as the image's entrypoint, torchrun")
        if len(argv) >= 3 and posixpath.basename(argv[0]) in ("sh", "bash") and argv[1] in ("-c", "-lc", "-ec"):
            argv = shlex.split(argv[2].split("&&")[-1].split(";")[-1])
            self.notes.append(
                "command: a shell line, read as words: its other commands left out, and its $VARIABLES kept as "
                "written (torchdeck runs no shell, so nothing expands them)"
            )
        entry = self.data["entrypoint"]
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
            workdir = container.get("workingDir") or runs.get("workingDir")
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
        if nnodes and ":" in nnodes and "min_nodes" not in self.data["cluster"]:
            low, _, high = nnodes.partition(":")
            if low.isdigit() and high.isdigit():
                self.data["cluster"]["min_nodes"], self.data["cluster"]["max_nodes"] = int(low), int(high)
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

    def _pod(self, pod: dict[str, Any], container: dict[str, Any]) -> None:
        cluster, resources = self.data["cluster"], self.data["resources"]
        res = container.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        for key in ("cpu", "memory"):
            value = requests.get(key, limits.get(key))
            if value is not None:
                resources[key] = str(value)
        gpus = limits.get("nvidia.com/gpu", requests.get("nvidia.com/gpu"))
        if gpus is not None:
            resources["gpus"] = int(gpus)
        if pod.get("serviceAccountName"):
            cluster["service_account"] = pod["serviceAccountName"]
        if container.get("imagePullPolicy") in ("Always", "IfNotPresent", "Never"):
            cluster["image_pull_policy"] = container["imagePullPolicy"]
        if pod.get("nodeSelector"):
            cluster["node_selector"] = {str(k): str(v) for k, v in pod["nodeSelector"].items()}
        for t in pod.get("tolerations") or []:
            if t.get("key") != "nvidia.com/gpu":
                self.notes.append(f"toleration {t.get('key')}: left out (torchdeck tolerates the GPU taint only)")
        if pod.get("affinity"):
            avoided = avoided_nodes(pod["affinity"])
            if avoided is not None:
                self.data["cluster"]["avoid_nodes"] = avoided
            else:
                self.notes.append("affinity: left out (use cluster.node_selector, or cluster.avoid_nodes)")
        env: dict[str, str] = {}
        unknown: set[str] = set()
        for e in container.get("env") or []:
            if e.get("name") == NODE_NAME_ENV:
                continue  # what torchdeck's own pods carry: rendered again
            if reserved_env(str(e.get("name", ""))):
                self.notes.append(f"env {e.get('name')}: torchdeck's or Kubeflow Trainer's own name; left out")
            elif "value" in e and re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", str(e.get("name", ""))):
                env[e["name"]] = kubelet_expand(str(e["value"]), env, unknown)  # earlier names, as the kubelet
                if e["name"] in LOADER_ENV:
                    self.notes.append(
                        f"env {e['name']}: kept; it changes what code every rank loads (read it before you run this)"
                    )
            else:
                self.notes.append(f"env {e.get('name')}: from a ConfigMap, Secret or field; left out")
        if unknown:
            self.notes.append(f"env: $({'), $('.join(sorted(unknown))}) kept as written (not set before it)")
        if env:
            self.data["env"] = env
        mounts = {m.get("name"): m for m in container.get("volumeMounts") or []}
        claimed = False
        for volume in pod.get("volumes") or []:
            name, mount = volume.get("name"), mounts.get(volume.get("name")) or {}
            path = mount.get("mountPath")
            if path == "/dev/shm" and (volume.get("emptyDir") or {}).get("medium") == "Memory":
                size = volume["emptyDir"].get("sizeLimit")
                if size:
                    resources["shm_size"] = str(size)
            elif "persistentVolumeClaim" in volume and not claimed and path:
                cluster["pvc"], cluster["mount_path"] = volume["persistentVolumeClaim"]["claimName"], path
                cluster["data_dir"] = posixpath.join(path, "data")
                claimed = True
            else:
                kind = next((k for k in volume if k != "name"), "?")
                self.notes.append(f"volume {name} ({kind}{' at ' + path if path else ''}): left out")


def avoided_nodes(affinity: dict[str, Any]) -> list[str] | None:
    """The nodes an affinity keeps pods off, where it says only that (the shape ``cluster.avoid_nodes``
    renders: one required term, ``metadata.name NotIn [...]``); None for any other affinity."""
    if set(affinity) != {"nodeAffinity"} or set(affinity["nodeAffinity"] or {}) != {
        "requiredDuringSchedulingIgnoredDuringExecution"
    }:
        return None
    terms = (affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] or {}).get("nodeSelectorTerms")
    if not isinstance(terms, list) or len(terms) != 1 or set(terms[0] or {}) != {"matchFields"}:
        return None
    fields = terms[0]["matchFields"]
    if not isinstance(fields, list) or len(fields) != 1:
        return None
    field = fields[0] or {}
    if (
        field.get("key") != "metadata.name"
        or field.get("operator") != "NotIn"
        or not isinstance(field.get("values"), list)
    ):
        return None
    return [str(v) for v in field["values"]]
