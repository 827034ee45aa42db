"""Issue 51, point 10: other people's objects, generated. Hypothesis makes jobs, pods, events and
Kueue workloads with arbitrary labels (torchdeck's among them, with any value), annotations (a spec
or a cost that is not one), names and statuses, in the run's namespace and in others, beside one
run torchdeck made; through ``jobs``, ``status``, the monitor's reader and ``import``. Each is a row,
a status or one line, never a traceback; whatever they say, the run torchdeck made is the one its
record names (its uid), its pods are only those its job owns, and nothing of theirs is stopped.

Derandomized (the same examples each run); ``EXAMPLES`` sums what is tried (docs/RELIABILITY.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kube_jobs import IMAGE, NS, install, make_pod, make_spec, set_conditions

from torchdeck.backends.base import JobState
from torchdeck.backends.errors import BackendError, SpecError
from torchdeck.backends.events import parse_metric_lines
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.kubernetes.importing import import_job
from torchdeck.backends.spec_options import reserved_env
from torchdeck.cli.jobs import format_status_table
from torchdeck.monitor.state import MonitorState
from torchdeck.terminal import printable_lines

pytestmark = pytest.mark.slow  # the fast lane (./scripts/test --fast) leaves these out

EXAMPLES = {"cluster objects": 25, "imported jobs": 100, "pod lines": 200}
PROFILE: dict[str, Any] = dict(derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))

TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["\x1b]0;pwned\x07", "\u202eevil", "a\r\nb", "x" * 3000, "1e999", "NaN", "../../etc", ""]),
)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=12,
)
LABEL_KEYS = st.sampled_from(
    ["torchdeck.dev/run", "torchdeck.dev/job", "torchdeck.dev/resumes", "app.kubernetes.io/managed-by",
     "kueue.x-k8s.io/queue-name", "training.kubeflow.org/replica-type", "training.kubeflow.org/replica-index",
     "training.kubeflow.org/job-name", "team"]
)  # fmt: skip
LABEL_VALUES = st.from_regex(r"\A([a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?)?\Z")
ANNOTATIONS = st.dictionaries(
    st.sampled_from(["torchdeck.dev/spec", "torchdeck.dev/cost", "torchdeck.dev/stopped", "torchdeck.dev/program",
                     "torchdeck.dev/pods", "torchdeck.dev/pattern", "note"]),
    st.one_of(TEXT, JSONISH.map(json.dumps)),
    max_size=4,
)  # fmt: skip
CONDITIONS = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["Created", "Running", "Succeeded", "Failed", "Restarting", "Suspended", "x"]),
         "status": st.sampled_from(["True", "False", "Unknown", "1"]), "reason": TEXT, "message": TEXT}
    ),
    max_size=3,
)  # fmt: skip
NAMES = st.from_regex(r"\A[a-z][a-z0-9-]{0,20}[a-z0-9]\Z")


RUN = "RUN"
"""Stands for the run's id in what is drawn (the id is made when the example runs: a strategy that
drew it would draw differently each run), put in its place after."""


def as_run(value: Any, run_id: str) -> Any:
    return run_id if value == RUN else value


OBJECTS = st.fixed_dictionaries(
    {
        "name": st.one_of(st.just(RUN), NAMES),
        "namespace": st.sampled_from([NS, "team-b", "kube-system"]),
        "labels": st.dictionaries(LABEL_KEYS, st.one_of(st.just(RUN), LABEL_VALUES), max_size=5),
        "annotations": ANNOTATIONS,
        "conditions": CONDITIONS,
        "replicas": st.one_of(st.integers(min_value=-3, max_value=2**40), TEXT),
        "pod_phase": st.sampled_from(["Running", "Failed", "Succeeded", "Pending", "Unknown", "x"]),
        "log": st.lists(st.one_of(TEXT, JSONISH.map(json.dumps)), max_size=4),
    }
)
"""A PyTorchJob someone else made, in the run's namespace or another, maybe with the run's very
name and labels, and a pod of theirs carrying labels of the run's, with its own log lines."""


@settings(max_examples=EXAMPLES["cluster objects"], **PROFILE)
@given(data=st.data())
def test_generated_objects_beside_a_run_never_break_jobs_or_status_and_never_become_it(kube_api, data):
    backend = KubernetesBackend(kube_api.kubeconfig)
    if not backend.client.exists("apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org"):
        install(backend, kinds=("pytorchjob",))
    run_id = backend.submit(make_spec(nodes=1))
    kube_api.call(kube_api.emulator.script_log, NS, f"{run_id}-master-0", [])
    make_pod(backend, run_id, f"{run_id}-master-0", "master")
    set_conditions(backend, run_id, "Created", "Running")
    made = []
    for i, theirs in enumerate(data.draw(st.lists(OBJECTS, max_size=3))):
        ns, name = theirs["namespace"], as_run(theirs["name"], run_id)
        labels = {k: as_run(v, run_id) for k, v in theirs["labels"].items()}
        body = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "labels": labels, "annotations": theirs["annotations"]},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": theirs["replicas"], "template": {
                "spec": {"containers": [{"name": "pytorch", "image": IMAGE}]}}}}},
        }  # fmt: skip
        path = f"apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
        try:
            backend.client.request("POST", path, body=body)
        except BackendError:
            continue  # the same name twice in one namespace: the API server's 409
        made.append((ns, name))
        backend.client.request("PATCH", f"{path}/{name}/status", body={"status": {"conditions": theirs["conditions"]}})
        pod = f"{run_id}-theirs-{i}"
        kube_api.call(kube_api.emulator.script_log, NS, pod, [str(line) for line in theirs["log"]])
        make_pod(backend, run_id, pod, "master", phase=theirs["pod_phase"], owner=None)

    for fresh in (backend, KubernetesBackend(kube_api.kubeconfig)):  # this console, and one without the record
        try:
            listed = fresh.list()
        except BackendError:
            continue
        table = format_status_table(listed)
        assert printable_lines(table) == table  # nothing in a row drives the terminal
    status = backend.status(run_id)
    assert status.state is JobState.RUNNING and not status.found_by_label
    assert [p.name for p in backend.pods(run_id, NS)] == [f"{run_id}-master-0"]
    for _, name in made:
        if name != run_id:
            try:
                backend.status(name)
            except BackendError:
                pass  # one line: ambiguous, not found, a job that is not one
    backend.cancel(run_id)
    for ns, name in made:  # nothing of theirs was stopped
        assert backend.client.exists(f"apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/{name}")
        backend.client.request("DELETE", f"apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/{name}")
    # kmock collects no garbage: the pods go too, so that a run id free again next second finds no pod of this one
    for leftover in backend.client.read_pods(NS, f"torchdeck.dev/run={run_id}"):
        backend.client.request("DELETE", f"api/v1/namespaces/{NS}/pods/{leftover.name}")


@settings(max_examples=EXAMPLES["imported jobs"], **PROFILE)
@given(
    name=NAMES,
    labels=st.dictionaries(LABEL_KEYS, LABEL_VALUES, max_size=4),
    annotations=ANNOTATIONS,
    env=st.lists(
        st.fixed_dictionaries(
            {
                "name": st.one_of(
                    TEXT,
                    st.sampled_from(["TORCHDECK_RUN_ID", "KUBEFLOW_TRAINER_SERVER_TOKEN", "LD_PRELOAD", "PYTHONPATH"]),
                ),
                "value": TEXT,
            }
        ),
        max_size=4,
    ),  # fmt: skip
    args=st.lists(TEXT, max_size=4),
    replicas=st.one_of(st.integers(min_value=-3, max_value=2**40), TEXT),
)
def test_import_of_anyones_job_is_a_spec_or_one_line(name, labels, annotations, env, args, replicas):
    container = {"name": "pytorch", "image": IMAGE, "command": ["torchrun", "train.py", *args], "env": env}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": replicas, "template": {"spec": {
            "containers": [container]}}}}},
    }  # fmt: skip
    try:
        found = import_job(job, name)
    except SpecError as exc:
        assert "\n" not in str(exc).strip()
        return
    assert not any(reserved_env(k) for k in found.spec.env)


@settings(max_examples=EXAMPLES["pod lines"], **PROFILE)
@given(st.lists(st.tuples(st.sampled_from(["step", "start", "error", "eval", "done", "checkpoint", "epoch"]),
                          st.dictionaries(TEXT, JSONISH, max_size=5), JSONISH),
                max_size=6))  # fmt: skip
def test_the_monitor_takes_any_line_a_pod_writes(records):
    """Any schema-1 line, its figures of any type: read the way every reader reads a pod's lines
    (``parse_metric_lines``), then folded by the monitor without raising; nothing it shows drives
    the terminal."""
    lines = [json.dumps({**rec, "schema": 1, "event": kind, "rank": rank, "time": 1.0}).encode()
             for kind, rec, rank in records]  # fmt: skip
    state = MonitorState()
    state.ingest(parse_metric_lines(lines))
    snap = state.snapshot()
    for text in (*snap.errors, *(r.detail for r in snap.ranks), *snap.gpu_by_host):
        assert "\x1b" not in text and "\x07" not in text
