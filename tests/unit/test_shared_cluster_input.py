"""Issue 51: what a cluster, a pod or a rank hands torchdeck passes one gate each: API paths quote
every segment, a triage dump is read against a schema and keyed by where it came from, the health
gate's node names are the gate pods' own, a rank's words are printable where the monitor takes
them in, a question never has untrusted text as ``input``'s prompt, and names torchdeck and the
Trainer set in every rank are not a spec's to set."""

from __future__ import annotations

import io
import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchdeck.backends import health, triage
from torchdeck.backends.base import MetricEvent
from torchdeck.backends.errors import BackendError, SpecError
from torchdeck.backends.kubernetes.client import api_path
from torchdeck.backends.kubernetes.identity import RunRecords, made_now
from torchdeck.backends.kubernetes.importing import import_job
from torchdeck.backends.spec import spec_from_dict
from torchdeck.monitor.state import MonitorState

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def test_every_segment_of_an_api_path_is_quoted():
    assert api_path("Pod", "ns", "a/../../nodes", "log") == "api/v1/namespaces/ns/pods/a%2F..%2F..%2Fnodes/log"
    assert (
        api_path("Pod", "ns", "p:9400", "proxy/metrics?x=1") == "api/v1/namespaces/ns/pods/p:9400/proxy/metrics%3Fx%3D1"
    )
    assert api_path("Node", name="n#1") == "api/v1/nodes/n%231"
    for name in (".", ".."):
        with pytest.raises(BackendError, match="is not a name an API path can hold"):
            api_path("Node", name=name)


@settings(max_examples=200, deadline=None)
@given(JSONISH, st.integers(min_value=0, max_value=7))
def test_any_dump_is_read_as_the_rank_it_came_from_or_not_at_all(value, rank):
    """Whatever a rank (or a pod pretending to be one) prints as a dump, the verdict reads it without
    raising; a dump read is always the rank of its stream, never the one it claims."""
    checked = triage.checked_dump(value, rank)
    if checked is not None:
        assert checked["rank"] == rank and isinstance(checked["pid"], int)
        assert all(isinstance(f["line"], int) for t in checked["threads"] for f in t["frames"])
    found = triage.verdict("run", 8, {rank: value}, "here")
    assert all(r.rank == rank for r in found.ranks)


def test_a_dump_that_claims_another_rank_or_huge_numbers_is_kept_to_its_own():
    frames = [{"file": "/code/train.py", "line": 1e999, "function": "main", "code": "x" * 10_000}]
    dump = {"rank": 0, "pid": "x", "host": ["h"], "threads": [{"main": True, "frames": frames}],
            "flight_recorder": [{"collective_seq_id": 1e999, "profiling_name": 3, "input_sizes": [[1e999]]}]}  # fmt: skip
    verdict = triage.verdict("run", 2, {1: dump}, "here")
    (rank,) = verdict.ranks
    assert rank.rank == 1 and rank.pid == 0 and rank.host == "" and rank.where == "train.py:0"
    assert len(rank.code) <= triage.MAX_TEXT and rank.collective is not None and rank.collective.seq == 0


def test_the_gate_names_only_the_nodes_its_pods_ran_on():
    row = {"bytes": 4096, "time_s": 0.001, "algbw_gbps": 4.0, "busbw_gbps": 4.0}
    result = {
        "backend": "gloo", "world_size": 2, "hosts": ["pod-0"], "rows": [row],
        "nodes": [{"node": "cpu-0"}, {"node": "control-plane"}, {"node": "Bad Name\x1b[2J"}, {"node": 7}, "junk"],
        "pairs": [{"a": "cpu-0", "b": "cpu-1"}, {"a": "cpu-0", "b": "control-plane"}],
    }  # fmt: skip
    kept = health.GateResult.from_tool(result).only_on({"cpu-0", "cpu-1"})
    assert [n.get("node") for n in kept.nodes] == ["cpu-0"]
    assert [dict(p) for p in kept.pairs] == [{"a": "cpu-0", "b": "cpu-1"}] and kept.dropped == 4


def test_gate_marks_kept_on_disk_are_read_as_node_names_only(tmp_path):
    (tmp_path / "latest.json").write_text(
        json.dumps({"time": 0, "short": {"cpu-2": "slow", "../../etc": "x", "Bad\x1b": "y", "n": "z" * 2000}})
    )
    marked = health.gate_marked(tmp_path)
    assert sorted(marked) == ["cpu-2", "n"] and len(marked["n"]) < 700


def test_a_ranks_words_are_printable_where_the_monitor_takes_them_in():
    state = MonitorState()
    said = {"message": "\x1b]0;pwned\x07boom\r\x1b[2J", "hint": "\u202eevil", "host": "h\x1b[31m"}
    state.ingest([MetricEvent("step", 0, 1.0, {"step": 1, "loss": 1.0, "gpu_util": 5, "host": said["host"]})])
    state.ingest([MetricEvent("error", 0, 2.0, {"message": said["message"], "hint": said["hint"]})])
    state.ingest([MetricEvent("start", 1, 2.0, {"model": "m\x1b[2Jx", "host": "\x07"})])
    snap = state.snapshot()
    text = " ".join([*snap.errors, *(r.detail for r in snap.ranks), str(snap.info), *snap.gpu_by_host])
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b]0;pwned\\x07boom" in snap.errors[0] and "\\u202eevil" in snap.errors[0]


def test_a_question_is_written_through_the_guard_never_as_inputs_prompt(monkeypatch):
    from torchdeck.cli import jobs

    prompts = []
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdin", type("Tty", (io.StringIO,), {"isatty": lambda self: True})("y\n"))
    monkeypatch.setattr(sys, "stderr", err)

    def typed(*prompt):
        prompts.append(prompt)
        return "y"

    monkeypatch.setattr("builtins.input", typed)
    assert jobs.ask("cordon node\x1b]0;x\x07? [y/N] ") is True
    assert prompts == [()] and "\x1b" not in err.getvalue() and "node\\x1b]0;x\\x07?" in err.getvalue()


@pytest.mark.parametrize(
    "name", ["TORCHDECK_TRIAGE_DIR", "torchdeck_run_id", "KUBEFLOW_TRAINER_SERVER_URL", "TORCHDECK_ANYTHING_NEW"]
)
def test_names_torchdeck_and_the_trainer_set_are_no_specs_to_set(name):
    with pytest.raises(SpecError, match="is torchdeck's or Kubeflow Trainer's to set in every rank"):
        spec_from_dict({"env": {name: "x"}})
    assert spec_from_dict({"env": {"LD_PRELOAD": "/x.so", "PYTHONPATH": "/p"}}).env["LD_PRELOAD"] == "/x.so"
    # the one of torchdeck's names that is a user's knob: how soon a pod's hang probe dumps (docs/HANGS.md)
    assert spec_from_dict({"env": {"TORCHDECK_TRIAGE_AFTER_S": "3"}}).env == {"TORCHDECK_TRIAGE_AFTER_S": "3"}


def test_import_leaves_out_reserved_names_and_says_so_of_what_changes_the_loaded_code():
    container = {
        "name": "pytorch",
        "image": "repo/img:1",
        "command": ["torchrun", "train.py"],
        "env": [
            {"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": "http://evil"},
            {"name": "TORCHDECK_TRIAGE_DIR", "value": "/tmp/x"},
            {"name": "LD_PRELOAD", "value": "/x.so"},
            {"name": "LR", "value": "0.1"},
        ],
    }
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "theirs"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [container]}}}}},
    }
    found = import_job(job, "theirs")
    assert found.spec.env == {"LD_PRELOAD": "/x.so", "LR": "0.1"}
    notes = " | ".join(found.notes)
    assert "env KUBEFLOW_TRAINER_SERVER_URL: torchdeck's or Kubeflow Trainer's own name; left out" in notes
    assert "env TORCHDECK_TRIAGE_DIR: torchdeck's or Kubeflow Trainer's own name; left out" in notes
    assert "env LD_PRELOAD: kept; it changes what code every rank loads" in notes


def test_a_run_record_is_read_back_only_as_written_and_for_its_own_cluster(tmp_path):
    server = "https://k:6443"
    made = made_now("run-1", server, "ctx", "ns", "pytorchjob", {"metadata": {"uid": "u-1"}}, None)
    RunRecords(tmp_path / "made").add(made)
    assert RunRecords(tmp_path / "made").get(server, "run-1") == made
    assert RunRecords(tmp_path / "made").on(server) == {"run-1": made}
    assert RunRecords(tmp_path / "made").on("https://other:6443") == {}  # the same id there is another run
    (folder,) = (tmp_path / "made").iterdir()
    (folder / "run-2.json").write_text((folder / "run-1.json").read_text())
    assert RunRecords(tmp_path / "made").get(server, "run-2") is None  # another run's record under this name
    for bad in (
        "[1]",
        '{"run_id": "run-3", "kind": "x"}',
        "not json",
        json.dumps({**json.loads((folder / "run-1.json").read_text()), "run_id": "run-3", "submitted_at": 1e999}),
    ):
        (folder / "run-3.json").write_text(bad)
        assert RunRecords(tmp_path / "made").get(server, "run-3") is None
    assert RunRecords(tmp_path / "made").get(server, "../etc/passwd") is None
    assert sorted(RunRecords(tmp_path / "made").on(server)) == ["run-1"]


@pytest.mark.parametrize("kind", ["pytorchjob", "trainjob", "mpijob", "job", "elasticjob"])
def test_stop_deletes_the_kinds_each_job_kind_renders_beside_it_and_lists_no_other(kind):
    """``stop`` lists and deletes only what the kind's template makes beside the job (a namespace's
    user may not list Deployments at all): the table agrees with what render makes."""
    from torchdeck.backends.kubernetes.kinds import JOB_KINDS
    from torchdeck.backends.kubernetes.manifests import render

    spec = spec_from_dict({"nodes": 2, "image": "repo/img:1", "namespace": "ns", "cluster": {"kind": kind}})
    rendered = render(spec, "run-1")
    made = {o["kind"] for o in rendered.objects} - {JOB_KINDS[kind].kind, "ConfigMap"}  # (a bundle is shared)
    assert made == set(JOB_KINDS[kind].beside)
