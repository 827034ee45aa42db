"""Issue 53, point 2: a job kind is one object (``backends/kubernetes/kinds.py``) that carries its
facts and its behaviour, so nothing else in the product names a kind; its operator releases are the
real cluster's (manifests/versions.toml); and the job objects torchdeck reads are typed views made
once at the edge (``kind_objects.py``)."""

from __future__ import annotations

import ast
import re

import pytest
import tomllib
from trainer_runs import REPO

from torchdeck.backends.errors import SpecError
from torchdeck.backends.kubernetes.kind_objects import JobObject, PodTemplate
from torchdeck.backends.kubernetes.kinds import JOB_KINDS, job_kind_of, live_kind
from torchdeck.backends.spec import KINDS, check_kind_fields, spec_from_dict

KIND_MODULES = {"backends/kubernetes/kinds.py"}
NAMES = {name for k in JOB_KINDS.values() for name in (k.key, k.kind)}
ALLOWED = {
    # (file, literal): why it may stay
    ("backends/spec.py", "pytorchjob"): "the JobKindName Literal (a type is static; kinds.py asserts the two "
    "agree), the spec option's default, and check_kind_fields (below)",
    ("backends/spec.py", "trainjob"): "the JobKindName Literal, and check_kind_fields: spec validation runs below "
    "the kubernetes package, which imports spec (an import of kinds.py there is a cycle, test_layering); "
    "test_the_specs_field_checks_are_the_kinds_own holds it to JobKind.check_fields",
    ("backends/spec.py", "mpijob"): "the JobKindName Literal, and check_kind_fields (as above)",
    ("backends/spec.py", "elasticjob"): "the JobKindName Literal, and check_kind_fields (as above)",
    ("backends/spec.py", "job"): "the JobKindName Literal",
    ("backends/kubernetes/client.py", "Job"): "Kubernetes' own batch/v1 Job in the built-in kinds' API table",
    ("backends/kubernetes/ownership.py", "Job"): "an owner reference's built-in kind (batch/v1 Job)",
    ("backends/kubernetes/tasks.py", "Job"): "the built-in kinds' API table, by name, for the task jobs",
    ("backends/eks/storage.py", "Job"): "the built-in Job among the storage objects' deletion order",
    ("backends/kubernetes/importing.py", "job"): "a job's default name, not a kind",
    ("cli/jobs.py", "job"): "a job's default name, not a kind",
}


def product_files() -> list[str]:
    folders = ("backends", "cli", "monitor", "trainer", "tui")
    files = [p for folder in folders for p in sorted((REPO / folder).rglob("*.py"))]
    return [str(p.relative_to(REPO)) for p in files] + ["settings.py", "report.py", "terminal.py", "__main__.py"]


def kind_literals(path: str) -> set[str]:
    """The string literals in a module that are a kind's name (docstrings aside)."""
    tree = ast.parse((REPO / path).read_text())
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and n.value in NAMES
    }


def test_nothing_but_the_kind_objects_names_a_kind() -> None:
    found = {(path, name) for path in product_files() if path not in KIND_MODULES for name in kind_literals(path)}
    assert found <= set(ALLOWED), sorted(found - set(ALLOWED))
    assert not set(ALLOWED) - found, f"no longer needed: {sorted(set(ALLOWED) - found)}"


def test_each_kind_is_one_object_with_its_template() -> None:
    assert tuple(JOB_KINDS) == KINDS
    for key, kind in JOB_KINDS.items():
        assert kind.key == key and (REPO / "manifests" / kind.template).is_file()
        assert job_kind_of({"kind": kind.kind}) is kind
        assert [t.version for t in kind.targets] == [kind.version] * len(kind.targets)
    assert {live_kind(w) for w in ("pytorchjobs.kubeflow.org", "jobs.batch", "mpijob", "trainjob")} == {
        "pytorchjob", "job", "mpijob", None
    }  # fmt: skip


def test_the_newest_releases_are_the_ones_the_real_cluster_runs() -> None:
    operators = tomllib.loads((REPO / "manifests" / "versions.toml").read_text())["operators"]
    newest = {k: kind.latest.release for k, kind in JOB_KINDS.items() if kind.latest}
    assert newest["pytorchjob"].endswith(operators["training_operator"])
    assert newest["trainjob"].endswith(operators["trainer"])
    assert newest["mpijob"].endswith(operators["mpi_operator"])
    source = (REPO / "backends" / "kubernetes" / "kinds.py").read_text()
    for release in operators.values():
        assert not re.search(rf"[\"'=]{re.escape(release)}\b", source), f"{release} is pinned again in kinds.py"


CLUSTER_FIELDS = [
    {},
    {"min_nodes": 1, "max_nodes": 2},
    {"queue": "team-a"},
    {"restart_policy": "ExitCode"},
    {"priority_class": "high"},
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fields", CLUSTER_FIELDS, ids=lambda f: ",".join(f) or "none")
def test_the_specs_field_checks_are_the_kinds_own(kind, fields) -> None:
    """spec.check_kind_fields (run where a spec is read) refuses what the kind object refuses."""
    spec = spec_from_dict({"name": "x", "nodes": 2})
    spec.cluster.__dict__.update(fields)
    refused: list[str] = []
    for check in (lambda: check_kind_fields(spec, kind), lambda: JOB_KINDS[kind].check_fields(spec)):
        try:
            check()
            refused.append(None)
        except SpecError as exc:
            refused.append(exc.field)
    if "priority_class" in fields:  # Kueue's, for any kind: spec's own check
        assert refused[0] == "cluster.priority_class"
    else:
        assert refused[0] == refused[1]


def test_a_job_object_is_read_once_into_its_kinds_view() -> None:
    job = {
        "kind": "PyTorchJob",
        "metadata": {"name": "r1", "labels": {"a": "b"}},
        "spec": {
            "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": "3", "template": {"spec": {}}}},
            "runPolicy": {"suspend": True},
        },
        "status": {"conditions": [{"type": "Running", "status": "True"}, {"type": "Created", "status": "False"}]},
    }
    kind = JOB_KINDS["pytorchjob"]
    view = kind.view(job)
    assert (view.name, view.namespace, view.labels) == ("r1", "", {"a": "b"})
    assert kind.nodes(view) == 4 and kind.is_suspended(job)
    assert set(view.status.holding()) == {"Running"}
    assert view.replica_specs["Worker"].template == PodTemplate(containers=())
    with pytest.raises(TypeError):
        JobObject.read({"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": ["a list"]}}, kind.replicas_at)
