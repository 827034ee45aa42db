"""The one-pod jobs around training on a cluster (``TaskKind``): data prepare (CIFAR-10 onto the
shared volume), model copy (the model file to S3) and model test; each is rendered by
``manifests.render_task``, started under a fresh name, waited for with its pods' diagnosis, and
ends with the tool's schema-1 result line (``events.tool_result``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from ..base import JobState
from ..errors import BackendError
from ..events import tool_result
from ..names import new_run_id
from ..spec import JobSpec, validate
from .client import ApiError, KubeClient, api_path
from .diagnosis import diagnose_pod, pod_findings
from .jobs import job_state
from .kinds import TASK_KIND
from .manifests import RUN_LABEL, Rendered, TaskKind, render_task
from .objects import ObjectMeta, Pod
from .ownership import OwnedBy


class TaskJobs:
    """A backend's task jobs: ``run`` starts one, waits for it and returns its result. It holds
    the connection and the one way the backend creates objects (preflight first), not the backend."""

    def __init__(self, client: KubeClient, apply: Callable[[JobSpec, Rendered, JobSpec], None]) -> None:
        self.client = client
        self.apply = apply
        """Preflight the third argument's spec, then create the rendered objects (``apply_rendered``)."""

    def start(
        self, spec: JobSpec, task: TaskKind, model_file: str | None = None, source: str | None = None
    ) -> tuple[str, str]:
        """Start the data-prep or model-test job; returns (its name, its namespace)."""
        spec = validate(spec)
        what = {"data-prep": "data", "model-test": "test", "model-copy": "copy"}[task]
        name = new_run_id(f"{spec.name}-{what}", lambda n: self._exists(spec.namespace, n))
        rendered = render_task(spec, task, name, model_file, source)
        checked = (
            spec
            if task != "data-prep"
            else dataclasses.replace(  # downloading needs no GPU
                spec, resources=dataclasses.replace(spec.resources, gpus=0)
            )
        )
        self.apply(spec, rendered, checked)
        return name, spec.namespace

    def _exists(self, namespace: str, name: str) -> bool:
        try:
            self.client.request("GET", api_path("Job", namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def wait(
        self,
        name: str,
        namespace: str,
        timeout_s: float = 900.0,
        poll_s: float = 1.0,
        on_wait: Callable[[str], None] = lambda reason: None,
    ) -> str:
        """Wait for a task job to end; its pod's output when it succeeded,
        else a BackendError that says why (the pod's diagnosis, its last lines)."""
        path = api_path("Job", namespace, name)
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.client.request("GET", path)
            owned = OwnedBy(self.client, namespace, ObjectMeta.from_api(job).uid)
            pods = [p for p in self.client.read_pods(namespace, f"{RUN_LABEL}={name}") if not owned.uid or owned(p)]
            state, reason = job_state(TASK_KIND, TASK_KIND.view(job), pods)
            if state.is_terminal:
                break
            findings = pod_findings(self.client, namespace, pods)
            on_wait(str(findings[0]) if findings else f"{name}: {self._last_line(namespace, pods) or state.value}")
            if time.monotonic() > deadline:
                first = findings[0] if findings else None
                raise BackendError(
                    f"{name} did not finish in {timeout_s:.0f} s"
                    + (f": {first.where}: {first.problem}" if first else ""),
                    first.fix if first else f"kubectl describe job -n {namespace} {name}",
                )
            time.sleep(poll_s)
        output = ""
        for pod in sorted(pods, key=lambda p: p.meta.created or 0.0):
            try:
                output = self.client.request(
                    "GET", api_path("Pod", namespace, pod.name, "log"), stream=True
                ).data.decode(errors="replace")
            except BackendError:
                continue
        if state is JobState.FAILED:
            tool_result(output)  # the tool's own error line, where it wrote one: its message and hint
            lines = [line for line in output.splitlines() if line.strip()]
            found = [f for p in pods for f in diagnose_pod(p, (), lines)]
            detail = found[0].problem if found else (lines[-1] if lines else reason or "no output")
            raise BackendError(
                f"{name} failed: {detail}", found[0].fix if found else f"kubectl logs -n {namespace} job/{name}"
            )
        return output

    def _last_line(self, namespace: str, pods: list[Pod]) -> str:
        """The newest line a running task pod wrote (its progress), or ''."""
        for pod in pods:
            if pod.phase != "Running":
                continue
            try:
                tail = (
                    self.client.request(
                        "GET",
                        api_path("Pod", namespace, pod.name, "log"),
                        query={"tailLines": 1},
                        stream=True,
                    )
                    .data.decode(errors="replace")
                    .strip()
                )
            except BackendError:
                continue
            if tail:
                return tail.splitlines()[-1].split("torchdeck.trainer.data: ", 1)[-1]
        return ""

    def run(
        self,
        spec: JobSpec,
        task: TaskKind,
        model_file: str | None,
        on_wait: Callable[[str], None],
        source: str | None = None,
    ) -> dict[str, object]:
        if task != "model-copy":
            spec.require_builtin({"data-prep": "data prepare", "model-test": "the model test"}[task])
        name, ns = self.start(spec, task, model_file, source)
        on_wait(f"started job {ns}/{name}")
        output = self.wait(name, ns, on_wait=on_wait)
        result = tool_result(output)
        if result is None:
            tail = " | ".join(line.strip() for line in output.splitlines()[-3:] if line.strip()) or "nothing"
            raise BackendError(f"{name} printed no result", f"its output ends: {tail[:300]}")
        return result
