"""The health gate on a cluster (``KubernetesBackend.check``): ``health.gate_spec`` submitted as a
run of the same kind as the run it gates (so placed, queued and admitted as that run would be),
waited for, its answer read from its rank 0's log, then deleted; the answer judged with each
node's instance type, and kept in the state folder for ``status``."""

from __future__ import annotations

import builtins
import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..base import GateStep, JobState, JobStatus, Plan, Progress
from ..errors import BackendError
from ..events import tool_result
from .client import ApiError, KubeClient, api_path
from .figures import log_lines, text_reader
from .finding import RunFinder
from .jobs import nproc_per_node
from .objects import Node, Pod
from .streams import has_started, node_ranks

if TYPE_CHECKING:
    from ..health import GateResult
    from ..spec import JobSpec

POLL_S = 2.0
"""How often the gate's run is asked where it stands."""


class GateHost(Protocol):
    """What the gate needs of the backend it runs on: to run a job as a run is run, read it back,
    and delete it (``KubernetesBackend`` is one)."""

    client: KubeClient
    ledger_dir: Path | None
    runs: RunFinder

    def submit(self, spec: JobSpec | Plan, progress: Progress = ...) -> str: ...
    def status(self, run_id: str) -> JobStatus: ...
    def pods(self, run_id: str, namespace: str) -> builtins.list[Pod]: ...
    def discard(self, run_id: str, trust_label: bool = False) -> builtins.list[str]: ...


def run_gate(backend: GateHost, spec: JobSpec, step: GateStep, progress: Progress) -> GateResult:
    """The gate on the nodes a run of ``spec`` would use, run, judged and kept."""
    from ..health import GateResult, gate_spec, judge, save

    gate = gate_spec(spec, step)
    run_id = backend.submit(gate)
    progress(f"health gate {run_id}: {gate.nodes} node(s) x {gate.nproc_per_node} rank(s), image {gate.image}")
    try:
        status = wait_for_gate(backend, run_id, step.timeout_s, progress)
        ran_on, text = gate_answer(backend, run_id)
        answer = tool_result(text)  # the check's own error line raises, with its message and hint
        if status.state is not JobState.SUCCEEDED or answer is None:
            raise BackendError(
                f"the health gate {run_id} {status.state.value}: {status.reason or 'it said no result'}",
                status.hint or "torchdeck logs of the gate are gone with it: run it again with kubectl to read them",
            )
    finally:
        with contextlib.suppress(BackendError, ApiError):
            backend.discard(run_id)
    result = GateResult.from_tool(answer).only_on(ran_on)
    result.instance_types = instance_types(backend.client, {str(n.get("node")) for n in result.nodes})
    result.short = judge(result, result.instance_types)
    result.time = time.time()
    result.gate = run_id
    if backend.ledger_dir is not None:
        save(backend.ledger_dir / "check", result)
    return result


def gate_answer(backend: GateHost, run_id: str) -> tuple[set[str], str]:
    """The nodes the gate's own pods ran on, and what its rank 0 wrote, read from rank 0's pod
    alone (an MPIJob's launcher, whose mpirun carries every rank's output, where it has one):
    any pod can print a result line; the gate's rank 0 writes the one."""
    job = backend.runs.job(run_id)
    ns = job.namespace
    pods = backend.pods(job.run_id, ns)
    ran_on = {p.node for p in pods if p.node}
    ranks = node_ranks([p for p in pods if has_started(p)])
    first = sorted((rank, pod) for pod, rank in ranks.items() if rank <= 0)[:1]  # the launcher (-1) first
    if not first:
        return ran_on, ""
    node, pod = first[0]
    try:
        answer = backend.client.request("GET", api_path("Pod", ns, pod, "log"), stream=True, timeout=30)
    except BackendError:
        return ran_on, ""
    batch = [(node, 0, raw) for raw in answer.data.splitlines()]
    lines = log_lines(batch, nproc_per_node(job.view), 0, text_reader(job))[1]
    return ran_on, "\n".join(line.text for line in lines)


def wait_for_gate(backend: GateHost, run_id: str, timeout_s: float, on_wait: Progress) -> JobStatus:
    """The gate's run, once it has ended; what it waits for said as it changes."""
    deadline, said = time.monotonic() + timeout_s, ""
    while True:
        status = backend.status(run_id)
        if status.state.is_terminal:
            return status
        words = status.reason or status.state.value
        if words != said:
            on_wait(f"health gate: {words}")
            said = words
        if time.monotonic() > deadline:
            raise BackendError(
                f"the health gate {run_id} did not end in {timeout_s:.0f} s ({words})",
                "its pods could not be placed or started: torchdeck status says why for a run of the same spec",
            )
        time.sleep(POLL_S)


def instance_types(client: KubeClient, nodes: set[str]) -> dict[str, str]:
    """Each node's instance type (its ``node.kubernetes.io/instance-type`` label), where it has one."""
    from ..health import INSTANCE_LABEL

    found: dict[str, str] = {}
    for name in sorted(nodes):
        try:
            node = client.request("GET", api_path("Node", name=name))
        except ApiError:
            continue
        kind = Node.from_api(node).meta.labels.get(INSTANCE_LABEL)
        if kind:
            found[name] = kind
    return found
