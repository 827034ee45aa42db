"""The kubernetes backend: a run is a PyTorchJob (or TrainJob, MPIJob,
indexed Job, ElasticJob) on any cluster in the kubeconfig, EKS or kind or
minikube alike, through the official ``kubernetes`` client.

The run id is the job object's name; every object and pod of a run carries
the ``torchdeck.dev/run`` label, so the cluster itself is the record: the
console and the CLI reattach from any machine with the kubeconfig.

Pods are followed by list + watch and every rank's pod log at once, one
stream per pod (kubectl stops at 5), across container restarts
(``kube_streams``); the trainer's metric lines in those logs feed the
monitor exactly as the local backend's files do. What is wrong is read from
the pods in ``kube_diagnosis``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

from ..base import Backend, GpuMetrics, JobState, JobStatus, LogLine, MetricEvent, NodeMetrics
from ..errors import BackendError, RunNotFound
from ..events import describe_record, parse_metric_lines
from .client import ApiError, Unreachable, quantity
from .diagnosis import Finding, diagnose_pod, job_findings
from .streams import PodLogFollower, has_started, node_rank
from . import crds
from .manifests import KIND_INFO, RUN_LABEL, Rendered, pod_selector, render, render_task
from ..spec import JobSpec, spec_from_dict, validate

MANAGED = "app.kubernetes.io/managed-by=torchdeck"
CRD_CACHE_S = 5.0
NODE_METRICS_TTL_S = 5.0
DCGM_SELECTOR = "app.kubernetes.io/name=dcgm-exporter"
DCGM_PORT = 9400
CORE_PATHS = {"Service": ("api/v1", "services"), "Job": ("apis/batch/v1", "jobs"),
              "Deployment": ("apis/apps/v1", "deployments")}
KIND_BY_NAME = {info.kind: key for key, info in KIND_INFO.items()}


def _api_base(kind_key: str) -> str:
    info = KIND_INFO[kind_key]
    return "api/v1" if info.group == "" else f"apis/{info.group}/{info.version}"


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def run_id_for(name: str, now: float | None = None) -> str:
    return f"{name}-{datetime.fromtimestamp(now or time.time(), timezone.utc).strftime('%m%d-%H%M%S')}"


class KubernetesBackend(Backend):
    """Jobs on a Kubernetes cluster."""

    name = "kubernetes"

    def __init__(self, kubeconfig: str | Path | None = None, context: str | None = None,
                 namespace: str | None = None, ledger_dir: str | Path | None = None):
        self.kubeconfig = str(kubeconfig) if kubeconfig else None
        self.context = context
        self.ledger_dir = Path(ledger_dir) if ledger_dir else None
        """Where the ledger is: jobs submitted are recorded there (None: not recorded)."""
        self.namespace = namespace
        """Where to look for runs; None: every namespace (or, where that is forbidden, the context's)."""
        self.context_namespace: str | None = None
        self._client = None
        self._node_cache: dict[str, tuple[float, list[NodeMetrics]]] = {}
        self._kinds: dict[str, tuple[str, str]] = {}
        """run id -> (kind key, namespace), learned on the way."""
        self._selectors: dict[str, str] = {}
        """run id -> its pods' label selector, learned with the kind."""
        self._crds: dict[str, tuple[float, dict[str, Any]]] = {}
        """kind -> (when read, the cluster's CRD)."""

    def __getstate__(self) -> dict:
        """A copy for another process: it opens its own connection."""
        return {**self.__dict__, "_client": None, "_node_cache": {}, "_crds": {}}

    # -- the connection ------------------------------------------------------------

    @property
    def client(self):
        if self._client is None:
            from kubernetes import client, config
            from kubernetes.config.config_exception import ConfigException

            cfg = client.Configuration()
            try:
                config.load_kube_config(config_file=self.kubeconfig, context=self.context, client_configuration=cfg)
            except (ConfigException, OSError, TypeError, ValueError) as exc:
                raise BackendError(f"cannot use the kubeconfig: {str(exc).splitlines()[0]}",
                                   "set KUBECONFIG (or TORCHDECK_KUBECONFIG) and pick a context with --context; "
                                   "for EKS: aws eks update-kubeconfig --name CLUSTER") from None
            cfg.connection_pool_maxsize = 512  # a stream per pod: 64 workers are 64 connections
            cfg.retries = 0
            self._client = client.ApiClient(cfg)
            if self.context_namespace is None:
                try:
                    contexts, active = config.list_kube_config_contexts(config_file=self.kubeconfig)
                    chosen = next((c for c in contexts if c["name"] == self.context), active)
                    self.context_namespace = (chosen.get("context") or {}).get("namespace") or "default"
                except (ConfigException, TypeError, KeyError):
                    pass
        return self._client

    def request(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None,
                stream: bool = False, timeout: float | None = 30) -> Any:
        """One API call; SDK and network errors become BackendError (ApiError for HTTP statuses)."""
        from kubernetes.client import ApiException

        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        try:
            response = self.client.call_api(
                "/" + path.lstrip("/"), method, query_params=params, body=body,
                # the API server takes a PATCH only with a patch type: a JSON merge patch here
                header_params={"Accept": "application/json", "Content-Type": "application/merge-patch+json"
                               if method == "PATCH" else "application/json"},
                auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
                _request_timeout=timeout)
        except ApiException as exc:
            raise ApiError.from_exception(exc) from None
        except Exception as exc:  # urllib3's connection errors, timeouts
            raise Unreachable(f"cannot reach the cluster: {type(exc).__name__}: {str(exc)[:200]}",
                              "check the network and the kubeconfig (kubectl cluster-info)") from None
        if stream:
            return response
        data = response.data
        return json.loads(data) if data else {}

    # -- rendering and submitting ---------------------------------------------------

    def render(self, spec: JobSpec) -> str:
        """The manifests, and what the preflight finds on the cluster (as comments), for --dry-run."""
        spec = validate(spec)
        try:
            target = self.served_target(spec.cluster.kind)
        except BackendError:  # unreachable, or serves no version we render: the preflight below says which
            target = None
        rendered = render(spec, run_id_for(spec.name), target=target)
        try:
            found = self.preflight(spec, rendered)
            checks = [f"# preflight: {f}\n" for f in found] or ["# preflight: the cluster can run it\n"]
        except BackendError as exc:
            checks = [f"# preflight not run: {exc}\n"]
        return "".join(checks) + rendered.to_yaml()

    def preflight(self, spec: JobSpec, rendered: Rendered) -> list[Finding]:
        """What would stop the job on this cluster, each with its fix."""
        found: list[Finding] = []
        info = KIND_INFO[rendered.kind]
        ns = spec.namespace
        if info.group != "batch":
            crd = f"{info.plural}.{info.group}"
            definition = self.crd(rendered.kind)
            if definition is None:
                found.append(Finding(rendered.kind, f"{info.kind} is not installed on this cluster (no CRD {crd})",
                                     f"install {info.operator}: {info.install}, or use --kind job (needs nothing)"))
            else:
                found += self._served_findings(rendered, definition)
        if not self._exists(f"api/v1/namespaces/{ns}"):
            found.append(Finding(ns, f"namespace {ns} does not exist", f"kubectl create namespace {ns}"))
            return found
        c = spec.cluster
        if c.pvc:
            try:
                pvc = self.request("GET", f"api/v1/namespaces/{ns}/persistentvolumeclaims/{c.pvc}")
                phase = (pvc.get("status") or {}).get("phase")
                if phase != "Bound":
                    found.append(Finding(c.pvc, f"PersistentVolumeClaim {c.pvc} is {phase or 'not bound'}",
                                         "kubectl describe pvc " + c.pvc + " (storage class, CSI driver, capacity); "
                                         "torchdeck storage creates a bound one"))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                found.append(Finding(c.pvc, f"PersistentVolumeClaim {c.pvc} does not exist in {ns}",
                                     "create it (torchdeck storage create), or fix cluster.pvc"))
        if c.service_account and not self._exists(f"api/v1/namespaces/{ns}/serviceaccounts/{c.service_account}"):
            found.append(Finding(c.service_account, f"service account {c.service_account} does not exist in {ns}",
                                 "create it (for S3 on EKS: eksctl create iamserviceaccount ...), "
                                 "or fix cluster.service_account"))
        if spec.resources.gpus:
            found += self._gpu_check(spec)
        return found

    def crd(self, kind: str) -> dict[str, Any] | None:
        """The CustomResourceDefinition the cluster holds for ``kind`` (None: not installed). One
        found is kept CRD_CACHE_S (it is hundreds of kB, and a submit wants it for the render and
        the preflight); "not installed" is asked again, so an operator installed a moment ago counts."""
        cached = self._crds.get(kind)
        if cached and time.monotonic() - cached[0] < CRD_CACHE_S:
            return cached[1]
        info = KIND_INFO[kind]
        try:
            definition = self.request(
                "GET", f"apis/apiextensions.k8s.io/v1/customresourcedefinitions/{info.plural}.{info.group}")
        except ApiError as exc:
            if exc.status != 404:
                raise
            return None
        self._crds[kind] = (time.monotonic(), definition)
        return definition

    def served_target(self, kind: str) -> crds.Target | None:
        """The operator release to render ``kind`` for, read from the cluster's CRD (the newest
        supported where the CRD is not there to read); BackendError where it serves none we render."""
        if KIND_INFO[kind].group == "batch":
            return None
        definition = self.crd(kind)
        return crds.for_cluster(kind, definition) if definition else crds.latest(kind)

    def _served_findings(self, rendered: Rendered, definition: dict[str, Any]) -> list[Finding]:
        """What the cluster's own CRD says of the rendered job: a version it does not serve, a field
        it would drop, a value it refuses."""
        info = KIND_INFO[rendered.kind]
        try:
            crds.for_cluster(rendered.kind, definition)
        except BackendError as exc:
            return [Finding(rendered.kind, exc.message, exc.hint)]
        version = rendered.main["apiVersion"].rpartition("/")[2]
        schema = crds.schema_of(definition, version)
        if schema is None:
            return []
        problems = crds.check(rendered.main, schema).problems
        return [Finding(f"{info.kind} {rendered.name}", f"{problems[0]} (the cluster's CRD {definition['metadata']['name']})"
                        + (f", and {len(problems) - 1} more" if len(problems) > 1 else ""),
                        f"torchdeck renders for {crds.supported(rendered.kind)}; torchdeck render --validate shows "
                        "every problem")] if problems else []

    def _gpu_check(self, spec: JobSpec) -> list[Finding]:
        wanted = spec.resources.gpus
        selector = spec.cluster.node_selector
        nodes = self.request("GET", "api/v1/nodes").get("items", [])
        matching = [n for n in nodes if all((n["metadata"].get("labels") or {}).get(k) == v
                                            for k, v in selector.items())]
        with_gpus = [n for n in matching if quantity(((n.get("status") or {}).get("allocatable") or {})
                                                      .get("nvidia.com/gpu", "0")) >= wanted]
        if with_gpus:
            return []
        where = f"{len(matching)}/{len(nodes)} nodes match cluster.node_selector" if selector else f"{len(nodes)} nodes"
        return [Finding("resources.gpus", f"no node can take a pod with {wanted} GPU(s): {where}, none with "
                        f"{wanted} nvidia.com/gpu allocatable",
                        "add a GPU nodegroup (and the NVIDIA device plugin), point cluster.node_selector at it, "
                        "or set resources.gpus: 0")]

    def _exists(self, path: str) -> bool:
        try:
            self.request("GET", path)
            return True
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise

    def submit(self, spec: JobSpec) -> str:
        spec = validate(spec)
        run_id = run_id_for(spec.name)
        rendered = render(spec, run_id, target=self.served_target(spec.cluster.kind))
        self._apply(spec, rendered, spec)
        self._kinds[run_id] = (rendered.kind, spec.namespace)
        self._selectors[run_id] = pod_selector(rendered.main)
        return run_id

    def _apply(self, spec: JobSpec, rendered: Rendered, checked: JobSpec) -> None:
        """Preflight ``checked``, then create the objects in order; the first problem stops it in one line."""
        problems = self.preflight(checked, rendered)
        if problems:
            more = f" (and {len(problems) - 1} more: torchdeck train --dry-run lists them)" if len(problems) > 1 else ""
            raise BackendError(f"{problems[0].where}: {problems[0].problem}{more}", problems[0].fix)
        for obj in rendered.objects:
            collection = self._collection(obj["kind"], spec.namespace)
            self.request("POST", collection, body=obj)
            self._note(f"{collection}/{obj['metadata']['name']}")

    # -- the ledger -------------------------------------------------------------------

    def _ledger_place(self) -> tuple[str, str, str, str]:
        """(context, scope, region, account): an EKS cluster torchdeck made is the scope of what runs in it."""
        context = self.context or ""
        if not context:
            try:
                from kubernetes import config
                context = config.list_kube_config_contexts(config_file=self.kubeconfig)[1]["name"]
            except Exception:  # no kubeconfig: the request itself said so already
                context = ""
        from ..eks.access import ClusterRecord

        assert self.ledger_dir is not None
        for record in ClusterRecord.all(self.ledger_dir):
            if record.context == context:
                return context, record.name, record.region, record.account
        return context, context, "", ""

    def _note(self, path: str) -> None:
        if self.ledger_dir is None:
            return
        from ..ledger import Ledger

        context, scope, region, account = self._ledger_place()
        Ledger(self.ledger_dir).add("k8s-object", f"{context}/{path}", region=region, account=account, scope=scope,
                                    detail={"context": context, "kubeconfig": self.kubeconfig or "", "path": path,
                                            "rank": 0})

    def _forget(self, path: str) -> None:
        if self.ledger_dir is None:
            return
        from ..ledger import Ledger

        context, _, region, _ = self._ledger_place()
        Ledger(self.ledger_dir).gone("k8s-object", f"{context}/{path}", region)

    def _collection(self, kind: str, namespace: str) -> str:
        if kind in CORE_PATHS:
            base, plural = CORE_PATHS[kind]
        else:
            key = KIND_BY_NAME[kind]
            base, plural = _api_base(key), KIND_INFO[key].plural
        return f"{base}/namespaces/{namespace}/{plural}"

    # -- finding runs ---------------------------------------------------------------

    def _list_jobs(self, selector: str) -> list[tuple[str, dict[str, Any]]]:
        """Every torchdeck job object matching ``selector``, of every installed kind."""
        found: list[tuple[str, dict[str, Any]]] = []
        for key, info in KIND_INFO.items():
            namespace = self.namespace
            items = None
            while items is None:
                path = (f"{_api_base(key)}/namespaces/{namespace}/{info.plural}" if namespace
                        else f"{_api_base(key)}/{info.plural}")
                try:
                    items = self.request("GET", path, query={"labelSelector": selector}).get("items", [])
                except ApiError as exc:
                    if exc.status == 403 and namespace is None:  # may not list cluster-wide: the context's
                        namespace = self.context_namespace or "default"
                        continue
                    if exc.status in (403, 404):
                        items = []  # kind not installed, or not ours to see
                        continue
                    raise
            found += [(key, item) for item in items
                      if (item.get("metadata", {}).get("labels") or {}).get(RUN_LABEL)]
        return found

    def _job(self, run_id: str) -> tuple[str, dict[str, Any]]:
        known = self._kinds.get(run_id)
        if known:
            key, ns = known
            try:
                return key, self.request("GET", f"{self._collection(KIND_INFO[key].kind, ns)}/{run_id}")
            except ApiError as exc:
                if exc.status != 404:
                    raise
        jobs = self._list_jobs(f"{RUN_LABEL}={run_id}")
        if not jobs:
            prefixed = [(k, o) for k, o in self._list_jobs(MANAGED) if o["metadata"]["name"].startswith(run_id)]
            if len(prefixed) == 1:
                jobs = prefixed
            elif len(prefixed) > 1:
                names = ", ".join(sorted(o["metadata"]["name"] for _, o in prefixed)[:5])
                raise RunNotFound(f"{run_id!r} matches several runs: {names}", "give more of the id")
        if not jobs:
            where = f"namespace {self.namespace}" if self.namespace else "any namespace"
            raise RunNotFound(f"no run {run_id!r} in {where} of this cluster",
                              "torchdeck --backend kubernetes jobs lists them; --namespace picks another")
        key, obj = jobs[0]
        self._kinds[obj["metadata"]["name"]] = (key, obj["metadata"].get("namespace") or self.namespace or "default")
        self._selectors[obj["metadata"]["name"]] = pod_selector(obj)
        return key, obj

    def pod_selector(self, run_id: str) -> str:
        """The label selector of a run's pods (the run label, or what its job's release gives them)."""
        return self._selectors.get(run_id) or f"{RUN_LABEL}={run_id}"

    def pods(self, run_id: str, namespace: str) -> list[dict[str, Any]]:
        return self.request("GET", f"api/v1/namespaces/{namespace}/pods",
                            query={"labelSelector": self.pod_selector(run_id)}).get("items", [])

    def _pod_findings(self, namespace: str, pods: list[dict[str, Any]]) -> list[Finding]:
        """What is wrong with these pods; the scheduler's events are read for Pending ones only."""
        return [f for pod in pods for f in diagnose_pod(
            pod, self._events(namespace, pod["metadata"]["name"])
            if (pod.get("status") or {}).get("phase") == "Pending" else ())]

    def _events(self, namespace: str, pod: str) -> list[dict[str, Any]]:
        try:
            return self.request("GET", f"api/v1/namespaces/{namespace}/events",
                                query={"fieldSelector": f"involvedObject.name={pod}"}).get("items", [])
        except BackendError:
            return []

    # -- state ----------------------------------------------------------------------

    def status(self, run_id: str) -> JobStatus:
        key, obj = self._job(run_id)
        ns = obj["metadata"].get("namespace") or self.namespace or "default"
        pods = self.pods(obj["metadata"]["name"], ns)
        status = self._status_of(key, obj, pods)
        self._progress(status, ns, pods)
        return status

    def _progress(self, status: JobStatus, namespace: str, pods: list[dict[str, Any]]) -> None:
        """Epoch, step, loss and accuracy from the tail of node 0's log (one small request)."""
        started = [p for p in pods if has_started(p)]
        first = sorted(started, key=lambda p: max(0, node_rank(p, started)))[:1]
        if not first:
            return
        try:
            tail = self.request("GET", f"api/v1/namespaces/{namespace}/pods/{first[0]['metadata']['name']}/log",
                                query={"tailLines": 200}, stream=True, timeout=10).data
        except BackendError:
            return
        for event in parse_metric_lines(tail.splitlines()):
            r = event.record
            if event.event == "start":
                status.epochs, status.total_steps = r.get("epochs") or status.epochs, r.get("total_steps")
            elif event.event == "step":
                status.step, status.epoch, status.loss = r.get("step") or 0, r.get("epoch") or 0, r.get("loss")
            elif event.event in ("eval", "done") and r.get("accuracy") is not None:
                status.accuracy = r["accuracy"]

    def _status_of(self, key: str, obj: dict[str, Any], pods: list[dict[str, Any]]) -> JobStatus:
        meta, spec, st = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        name = meta["name"]
        state, reason = job_state(key, obj, pods)
        findings = [] if state.is_terminal else self._pod_findings(meta.get("namespace", "default"), pods)
        findings += job_findings(name, st.get("conditions") or [], (spec.get("runPolicy") or {}).get("backoffLimit"))
        if findings and not reason:
            reason = str(findings[0].where) + ": " + findings[0].problem
        restarts = sum(cs.get("restartCount", 0) for p in pods
                       for cs in (p.get("status") or {}).get("containerStatuses") or [])
        return JobStatus(
            run_id=name, name=(meta.get("labels") or {}).get("torchdeck.dev/job", name), backend=self.name,
            state=state, world_size=world_size(key, obj), submitted_at=_ts(meta.get("creationTimestamp")) or 0.0,
            finished_at=_ts(st.get("completionTime")), reason=reason,
            hint=findings[0].fix if findings else "", restarts=restarts,
            location=f"{meta.get('namespace', 'default')}/{KIND_INFO[key].kind}")

    def list(self) -> list[JobStatus]:
        jobs = self._list_jobs(MANAGED)
        out = []
        for key, obj in jobs:
            self._kinds[obj["metadata"]["name"]] = (key, obj["metadata"].get("namespace", "default"))
            out.append(self._status_of(key, obj, []))
        return sorted(out, key=lambda s: s.submitted_at, reverse=True)

    def cancel(self, run_id: str) -> JobStatus:
        key, obj = self._job(run_id)
        name, ns = obj["metadata"]["name"], obj["metadata"].get("namespace", "default")
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        self.request("DELETE", f"{self._collection(KIND_INFO[key].kind, ns)}/{name}", body=body)
        self._forget(f"{self._collection(KIND_INFO[key].kind, ns)}/{name}")
        for kind in ("Service", "Deployment"):  # the plain Job's service, the ElasticJob's etcd
            collection = self._collection(kind, ns)
            for item in self.request("GET", collection, query={"labelSelector": f"{RUN_LABEL}={name}"}).get("items", []):
                self.request("DELETE", f"{collection}/{item['metadata']['name']}", body=body)
                self._forget(f"{collection}/{item['metadata']['name']}")
        status = self._status_of(key, obj, [])
        status.state, status.reason = JobState.CANCELLED, "stopped by the user; its pods are being deleted"
        return status

    # -- jobs around training ---------------------------------------------------------

    def start_task(self, spec: JobSpec, task: str, model_file: str | None = None,
                   source: str | None = None) -> tuple[str, str]:
        """Start the data-prep or model-test job; returns (its name, its namespace)."""
        spec = validate(spec)
        name = run_id_for(f"{spec.name}-{ {'data-prep': 'data', 'model-test': 'test'}.get(task, 'copy')}")
        rendered = render_task(spec, task, name, model_file, source)
        checked = spec if task != "data-prep" else dataclasses.replace(  # downloading needs no GPU
            spec, resources=dataclasses.replace(spec.resources, gpus=0))
        self._apply(spec, rendered, checked)
        return name, spec.namespace

    def wait_task(self, name: str, namespace: str, timeout_s: float = 900.0, poll_s: float = 1.0,
                  on_wait: Callable[[str], None] = lambda reason: None) -> str:
        """Wait for a task job to end; its pod's output when it succeeded,
        else a BackendError that says why (the pod's diagnosis, its last lines)."""
        path = f"apis/batch/v1/namespaces/{namespace}/jobs/{name}"
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.request("GET", path)
            pods = self.pods(name, namespace)
            state, reason = job_state("job", job, pods)
            if state.is_terminal:
                break
            findings = self._pod_findings(namespace, pods)
            on_wait(str(findings[0]) if findings else f"{name}: {self._last_line(namespace, pods) or state.value}")
            if time.monotonic() > deadline:
                first = findings[0] if findings else None
                raise BackendError(f"{name} did not finish in {timeout_s:.0f} s"
                                   + (f": {first.where}: {first.problem}" if first else ""),
                                   first.fix if first else f"kubectl describe job -n {namespace} {name}")
            time.sleep(poll_s)
        output = ""
        for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
            try:
                output = self.request("GET", f"api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/log",
                                      stream=True).data.decode(errors="replace")
            except BackendError:
                continue
        if state is JobState.FAILED:
            lines = [line for line in output.splitlines() if line.strip()]
            found = [f for p in pods for f in diagnose_pod(p, (), lines)]
            detail = found[0].problem if found else (lines[-1] if lines else reason or "no output")
            raise BackendError(f"{name} failed: {detail}",
                               found[0].fix if found else f"kubectl logs -n {namespace} job/{name}")
        return output

    def _last_line(self, namespace: str, pods: list[dict[str, Any]]) -> str:
        """The newest line a running task pod wrote (its progress), or ''."""
        for pod in pods:
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            try:
                tail = self.request("GET", f"api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/log",
                                    query={"tailLines": 1}, stream=True).data.decode(errors="replace").strip()
            except BackendError:
                continue
            if tail:
                return tail.splitlines()[-1].split("torchdeck.trainer.data: ", 1)[-1]
        return ""

    def _run_task(self, spec: JobSpec, task: str, model_file: str | None,
                  on_wait: Callable[[str], None], source: str | None = None) -> dict[str, Any]:
        name, ns = self.start_task(spec, task, model_file, source)
        on_wait(f"started job {ns}/{name}")
        return _last_json(self.wait_task(name, ns, on_wait=on_wait), name)

    def prepare_data(self, spec: JobSpec, on_wait: Callable[[str], None] = lambda line: None,
                     source: str | None = None) -> dict[str, Any]:
        return self._run_task(spec, "data-prep", None, on_wait, source)

    def copy_model(self, spec: JobSpec, model_file: str, target: str,
                   on_wait: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
        """The model-copy job: the model file on the shared volume to ``target`` (s3://), so it can
        leave the cluster; the job runs with the spec's service account (its IRSA role)."""
        return self._run_task(spec, "model-copy", model_file, on_wait, target)

    def model_file_of(self, run_id: str) -> tuple[JobSpec, str]:
        """The spec read back from the job object (image, namespace, volume,
        service account, paths), and the model file its trainer writes."""
        key, obj = self._job(run_id)
        pod = first_pod_spec(obj.get("spec") or {})

        def arg(flag: str) -> str | None:
            return argument(obj, flag)

        container = (pod.get("containers") or [{}])[0]
        image = container.get("image") or ((obj.get("spec") or {}).get("trainer") or {}).get("image")
        claims = [v["persistentVolumeClaim"]["claimName"] for v in walk_volumes(obj) if "persistentVolumeClaim" in v]
        gpus = (container.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu")
        spec_data = {
            "name": (obj["metadata"].get("labels") or {}).get("torchdeck.dev/job", "cifar10"), "image": image,
            "namespace": obj["metadata"].get("namespace", "default"), "device": arg("--device") or "auto",
            "resources": {"gpus": int(gpus) if gpus else 0},
            "cluster": {"pvc": claims[0] if claims else None, "data_dir": arg("--data-dir") or "/shared/data",
                        "service_account": pod.get("serviceAccountName"),
                        "node_selector": pod.get("nodeSelector") or {}},
        }
        spec = spec_from_dict(spec_data, f"{KIND_INFO[key].kind}/{obj['metadata']['name']}")
        checkpoint_dir = arg("--checkpoint-dir")
        model_file = arg("--model-file") or (f"{checkpoint_dir}/model.pt" if checkpoint_dir else None)
        if model_file is None:
            raise BackendError(f"{run_id}: the job does not say where its model goes", "pass --model-file")
        return spec, model_file

    def test_model(self, spec: JobSpec, model_file: str | None = None,
                   on_wait: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
        return self._run_task(spec, "model-test", model_file, on_wait)

    # -- pods, logs and metrics -----------------------------------------------------

    def _namespace_of(self, run_id: str) -> tuple[str, str, dict[str, Any]]:
        key, obj = self._job(run_id)
        return obj["metadata"]["name"], obj["metadata"].get("namespace", "default"), obj

    def _log_lines(self, batch: list[tuple[int, int, bytes]], nproc: int,
                   rank: int | None = None) -> tuple[list[MetricEvent], list[LogLine]]:
        """Raw pod-log lines as metric events and as log lines (metric lines in words)."""
        events: list[MetricEvent] = []
        lines: list[LogLine] = []
        for node, attempt, raw in batch:
            parsed = parse_metric_lines([raw]) if raw[:1] == b"{" else ()
            if parsed:
                events.append(parsed[0])
            r = parsed[0].rank if parsed else (node * nproc if node >= 0 else -1)
            if rank is None or r == rank:
                lines.append(LogLine(r, describe_record(parsed[0].record) if parsed
                                     else raw.decode(errors="replace"), attempt))
        return events, lines

    def logs(self, run_id: str, rank: int | None = None, follow: bool = False,
             poll_s: float = 0.2) -> Iterator[list[LogLine]]:
        name, ns, obj = self._namespace_of(run_id)
        nproc = nproc_per_node(obj)
        follower = PodLogFollower(self, name, ns, follow=follow)
        follower.start()
        try:
            while True:
                batch, done = follower.take(poll_s)
                lines = self._log_lines(batch, nproc, rank)[1]
                if lines or follow:
                    yield lines
                if done:
                    return
        finally:
            follower.stop()

    logs_carry_metrics = True

    async def follow(self, run_id: str) -> AsyncIterator[tuple[list[MetricEvent], list[LogLine]]]:
        """Every pod's log once, as metric events and log lines together."""
        name, ns, obj = await asyncio.to_thread(self._namespace_of, run_id)
        nproc = nproc_per_node(obj)
        follower = PodLogFollower(self, name, ns, follow=True)
        follower.start()
        try:
            while True:
                batch, done = await asyncio.to_thread(follower.take, 0.1)
                if batch:
                    yield self._log_lines(batch, nproc)
                if done:
                    return
        finally:
            follower.stop()

    async def metrics(self, run_id: str, follow: bool = True,
                      poll_s: float = 0.1) -> AsyncIterator[list[MetricEvent]]:
        name, ns, _ = await asyncio.to_thread(self._namespace_of, run_id)
        follower = PodLogFollower(self, name, ns, follow=follow)
        follower.start()
        try:
            while True:
                batch, done = await asyncio.to_thread(follower.take, poll_s)
                events = parse_metric_lines([raw for _, _, raw in batch])
                if events:
                    yield events
                if done:
                    return
        finally:
            follower.stop()

    def node_metrics(self, run_id: str) -> list[NodeMetrics]:
        """Node CPU and memory from metrics-server, which measures every 15 s:
        asked again at most every NODE_METRICS_TTL_S."""
        cached = self._node_cache.get(run_id)
        if cached and time.monotonic() - cached[0] < NODE_METRICS_TTL_S:
            return cached[1]
        result = self._measure_nodes(run_id)
        self._node_cache[run_id] = (time.monotonic(), result)
        return result

    def _dcgm_gpus(self, nodes: set[str]) -> dict[str, list[GpuMetrics]]:
        """Per node, its GPUs as the DCGM exporter pod on it reports them
        (through the API server's pod proxy); nothing where none runs."""
        try:
            exporters = self.request("GET", "api/v1/pods", query={"labelSelector": DCGM_SELECTOR}).get("items", [])
        except BackendError:
            return {}
        found: dict[str, list[GpuMetrics]] = {}
        for pod in exporters:
            node = (pod.get("spec") or {}).get("nodeName")
            if node not in nodes or (pod.get("status") or {}).get("phase") != "Running":
                continue
            meta = pod["metadata"]
            try:
                text = self.request("GET", f"api/v1/namespaces/{meta.get('namespace', 'default')}/pods/"
                                           f"{meta['name']}:{DCGM_PORT}/proxy/metrics", stream=True, timeout=5).data
            except BackendError:
                continue
            found[node] = parse_dcgm(text.decode(errors="replace"))
        return found

    def _measure_nodes(self, run_id: str) -> list[NodeMetrics]:
        name, ns, _ = self._namespace_of(run_id)
        pods = self.pods(name, ns)
        node_names = sorted({(p.get("spec") or {}).get("nodeName") for p in pods} - {None})
        if not node_names:
            return []
        usage: dict[str, dict[str, str]] = {}
        note = ""
        try:
            for item in self.request("GET", "apis/metrics.k8s.io/v1beta1/nodes").get("items", []):
                usage[item["metadata"]["name"]] = item.get("usage") or {}
        except ApiError:
            note = "no metrics-server: install it for node CPU and memory"
        dcgm = self._dcgm_gpus(set(node_names))
        out = []
        for node_name in node_names:
            try:
                node = self.request("GET", f"api/v1/nodes/{node_name}")
            except ApiError:
                continue
            alloc = (node.get("status") or {}).get("allocatable") or {}
            cpu_total = quantity(alloc.get("cpu", "0"))
            mem_total = quantity(alloc.get("memory", "0"))
            used = usage.get(node_name, {})
            gpus = int(quantity(alloc.get("nvidia.com/gpu", "0")))
            # The API has GPU counts, not utilization: that comes from a DCGM
            # exporter where one runs (else from the trainer's own gpu_util).
            measured = dcgm.get(node_name, [])
            gpu_note = ("" if measured else
                        f"{gpus} GPU(s) allocatable; no DCGM exporter for utilization" if gpus else "no GPU")
            out.append(NodeMetrics(
                name=node_name, cpu_percent=100.0 * quantity(used.get("cpu", "0")) / cpu_total if cpu_total else 0.0,
                cpu_count=int(cpu_total) or 1, mem_used_mb=quantity(used.get("memory", "0")) / 2**20,
                mem_total_mb=mem_total / 2**20, gpus=measured,
                gpu_note="; ".join(n for n in (gpu_note, note) if n),
                hosts=sorted(p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName") == node_name)))
        return out


def walk_volumes(obj: Any) -> list[dict[str, Any]]:
    """Every volume declared anywhere in a job object."""
    found: list[dict[str, Any]] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "volumes" and isinstance(value, list):
                found += [v for v in value if isinstance(v, dict)]
            else:
                found += walk_volumes(value)
    elif isinstance(obj, list):
        for value in obj:
            found += walk_volumes(value)
    return found


def _last_json(output: str, where: str) -> dict[str, Any]:
    """The JSON document a task printed last (evaluate prints it indented, data one line)."""
    lines = output.splitlines()
    for start in range(len(lines) - 1, -1, -1):
        if lines[start].startswith("{"):
            try:
                return json.loads("\n".join(lines[start:]))
            except ValueError:
                continue
    raise BackendError(f"{where} printed no result", f"its output ends: {' | '.join(lines[-3:]) or 'nothing'}")


def parse_dcgm(text: str) -> list[GpuMetrics]:
    """GPU utilization and framebuffer memory from a DCGM exporter's
    Prometheus text (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED/FREE, in MiB)."""
    gpus: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        if not line.startswith("DCGM_FI_DEV_") or "{" not in line:
            continue
        metric, rest = line.split("{", 1)
        labels_text, _, value = rest.rpartition("}")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
        try:
            index, number = int(labels.get("gpu", "0")), float(value.split()[0])
        except (ValueError, IndexError):
            continue
        gpu = gpus.setdefault(index, {"name": labels.get("modelName", "GPU")})
        gpu[metric] = number
    return [GpuMetrics(i, g["name"], g.get("DCGM_FI_DEV_GPU_UTIL", 0.0), g.get("DCGM_FI_DEV_FB_USED", 0.0),
                       g.get("DCGM_FI_DEV_FB_USED", 0.0) + g.get("DCGM_FI_DEV_FB_FREE", 0.0))
            for i, g in sorted(gpus.items())]


def world_size(key: str, obj: dict[str, Any]) -> int:
    spec = obj.get("spec") or {}
    nproc = nproc_per_node(obj)
    if key == "pytorchjob":
        return nproc * sum(r.get("replicas", 1) for r in (spec.get("pytorchReplicaSpecs") or {}).values())
    if key == "mpijob":
        return nproc * ((spec.get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("replicas", 1)
    if key == "job":
        return nproc * spec.get("completions", 1)
    if key == "trainjob":
        return nproc * (spec.get("trainer") or {}).get("numNodes", 1)
    if key == "elasticjob":
        return nproc * ((spec.get("replicaSpecs") or {}).get("Worker") or {}).get("replicas", 1)
    return nproc


def nproc_per_node(obj: dict[str, Any]) -> int:
    """Ranks per pod, read back from the job (so any machine can reattach)."""
    spec = obj.get("spec") or {}
    if spec.get("nprocPerNode"):
        return int(spec["nprocPerNode"])
    if (spec.get("trainer") or {}).get("numProcPerNode"):
        return int(spec["trainer"]["numProcPerNode"])
    nproc = argument(obj, "--nproc-per-node")
    return int(nproc) if nproc and nproc.isdigit() else 1


def _string_lists(node: Any) -> Iterator[list[str]]:
    """Every list of strings in a job object: its containers' commands and args."""
    if isinstance(node, dict):
        for value in node.values():
            yield from _string_lists(value)
    elif isinstance(node, list):
        if node and all(isinstance(v, str) for v in node):
            yield node
        for value in node:
            yield from _string_lists(value)


def argument(obj: dict[str, Any], flag: str) -> str | None:
    """The value after ``flag`` in the job's container arguments, if any."""
    for words in _string_lists(obj.get("spec") or {}):
        if flag in words[:-1]:
            return words[words.index(flag) + 1]
    return None


def first_pod_spec(node: Any) -> dict[str, Any]:
    """The first pod spec in a job object (a TrainJob's is its override of the runtime's)."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list) and node["containers"]:
            return node
        values = node.values()
    elif isinstance(node, list):
        values = node
    else:
        return {}
    for value in values:
        found = first_pod_spec(value)
        if found:
            return found
    return {}


KUBEFLOW_STATES = (("Succeeded", JobState.SUCCEEDED), ("Failed", JobState.FAILED),
                   ("Restarting", JobState.RUNNING), ("Running", JobState.RUNNING),
                   ("Suspended", JobState.PENDING), ("Created", JobState.PENDING))


def job_state(key: str, obj: dict[str, Any], pods: list[dict[str, Any]]) -> tuple[JobState, str]:
    """The job's own conditions mapped onto JobState, with the condition's message."""
    st = obj.get("status") or {}
    conditions = {c.get("type"): c for c in st.get("conditions") or [] if c.get("status") == "True"}
    if key == "job":
        if "Complete" in conditions:
            return JobState.SUCCEEDED, ""
        if "Failed" in conditions:
            return JobState.FAILED, conditions["Failed"].get("message") or conditions["Failed"].get("reason", "")
        return (JobState.RUNNING if st.get("active") and _any_running(pods) else JobState.PENDING), ""
    if key == "trainjob":
        if "Complete" in conditions:
            return JobState.SUCCEEDED, ""
        if "Failed" in conditions:
            return JobState.FAILED, conditions["Failed"].get("message", "")
        return (JobState.RUNNING if _any_running(pods) else JobState.PENDING), ""
    for kind, state in KUBEFLOW_STATES:
        if kind in conditions:
            message = conditions[kind].get("message", "") if state is JobState.FAILED or kind == "Restarting" else ""
            if state is JobState.RUNNING and not _any_running(pods) and pods:
                return JobState.PENDING, message
            return state, message
    return JobState.PENDING, ""


def _any_running(pods: list[dict[str, Any]]) -> bool:
    return any((p.get("status") or {}).get("phase") == "Running" for p in pods)


