"""The operators' own CustomResourceDefinitions, kept as they publish them in
``manifests/crds/`` (``SOURCES.json`` says where each came from;
``manifests/crds/refresh.py`` refreshes them), and a check of an object
against one as the API server makes it on create.

A CRD drops a field its schema does not name without a word (structural
pruning), so a manifest written for another release of an operator starts
without its volumes or labels and nobody is told. ``check`` therefore calls
every field the schema would prune an error, besides types, required fields,
enums, patterns, sizes and the CEL rules that apply on create.

``Target`` is one operator release torchdeck renders for; ``for_cluster``
picks the one that matches what a cluster serves, from its CRD object."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from ..errors import BackendError
from ..spec import JobKindName


@dataclass(frozen=True)
class Target:
    """One operator release that torchdeck renders a kind for."""

    kind: JobKindName
    """torchdeck's name of the kind (cluster.kind)."""
    release: str
    crd_file: str
    """The CRD as that release publishes it, in manifests/crds/."""
    version: str
    """The API version rendered (the group is the CRD's)."""
    pod_overrides: str = ""
    """TrainJob only: where the job's pod settings go in this release."""


TRAINJOB_OVERRIDES = ("podSpecOverrides", "podTemplateOverrides", "runtimePatches")
TARGETS: dict[JobKindName, tuple[Target, ...]] = {
    # Oldest first: the last one is what `render` targets by default.
    "pytorchjob": (Target("pytorchjob", "Kubeflow Training Operator v1.9.4", "pytorchjob-trainer-v1.9.4.yaml", "v1"),),
    "trainjob": (
        Target("trainjob", "Kubeflow Trainer v2.0.1", "trainjob-trainer-v2.0.1.yaml", "v1alpha1", "podSpecOverrides"),
        Target(
            "trainjob", "Kubeflow Trainer v2.1.0", "trainjob-trainer-v2.1.0.yaml", "v1alpha1", "podTemplateOverrides"
        ),
        Target("trainjob", "Kubeflow Trainer v2.2.1", "trainjob-trainer-v2.2.1.yaml", "v1alpha1", "runtimePatches"),
        Target("trainjob", "Kubeflow Trainer v2.3.0", "trainjob-trainer-v2.3.0.yaml", "v1alpha1", "runtimePatches"),
    ),
    "mpijob": (Target("mpijob", "Kubeflow MPI Operator v0.8.2", "mpijob-mpi-operator-v0.8.2.yaml", "v2beta1"),),
    "elasticjob": (
        Target("elasticjob", "TorchElastic controller v0.2.2", "elasticjob-elastic-v0.2.2.yaml", "v1alpha1"),
    ),
}


def latest(kind: JobKindName) -> Target | None:
    """The newest release torchdeck renders ``kind`` for (None: a built-in kind)."""
    targets = TARGETS.get(kind)
    return targets[-1] if targets else None


def supported(kind: JobKindName) -> str:
    """The releases torchdeck renders ``kind`` for, in words."""
    return ", ".join(t.release for t in TARGETS.get(kind, ()))


@functools.cache
def crd(file: str) -> dict[str, Any]:
    """A CRD from manifests/crds/, parsed once."""
    text = (resources.files("torchdeck") / "manifests" / "crds" / file).read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return next(d for d in yaml.load_all(text, Loader=loader) if d)


def sources() -> dict[str, Any]:
    """Where each CRD file came from: repository, ref, commit, path, sha256."""
    return json.loads((resources.files("torchdeck") / "manifests" / "crds" / "SOURCES.json").read_text())


def served_versions(definition: dict[str, Any]) -> list[str]:
    """The API versions a CRD object serves (apiextensions v1, or the v1beta1 form)."""
    spec = definition.get("spec") or {}
    versions = spec.get("versions")
    if versions:
        return [v["name"] for v in versions if v.get("served", True)]
    return [spec["version"]] if spec.get("version") else []


def schema_of(definition: dict[str, Any], version: str) -> dict[str, Any] | None:
    """The openAPIV3Schema a CRD object gives ``version`` (None where it gives none)."""
    spec = definition.get("spec") or {}
    for v in spec.get("versions") or ():
        if v.get("name") == version and (v.get("schema") or {}).get("openAPIV3Schema"):
            return v["schema"]["openAPIV3Schema"]
    return (spec.get("validation") or {}).get("openAPIV3Schema")


def target_schema(target: Target) -> dict[str, Any]:
    schema = schema_of(crd(target.crd_file), target.version)
    assert schema is not None, f"{target.crd_file} has no schema for {target.version}"
    return schema


def for_cluster(kind: JobKindName, definition: dict[str, Any]) -> Target:
    """The release to render ``kind`` for, from the CRD object the cluster holds; BackendError
    where the cluster serves no version torchdeck supports."""
    name = (definition.get("metadata") or {}).get("name", kind)
    served = served_versions(definition)
    candidates = [t for t in TARGETS[kind] if t.version in served]
    if not candidates:
        hint = {
            "mpijob": "the Kubeflow Training Operator v1 installs an MPIJob v1 CRD; install the MPI Operator "
            "(v2beta1) instead, or use --kind pytorchjob"
        }.get(kind, f"install {supported(kind)}")
        raise BackendError(
            f"this cluster's {name} serves {', '.join(served) or 'no version'}; torchdeck renders "
            f"{TARGETS[kind][-1].version} ({supported(kind)})",
            hint,
        )
    if kind != "trainjob":
        return candidates[-1]
    schema = schema_of(definition, candidates[-1].version)
    if schema is None:  # a CRD without a schema keeps whatever it is sent
        return candidates[-1]
    fields = set((schema.get("properties", {}).get("spec") or {}).get("properties") or {})
    for target in reversed(candidates):
        if target.pod_overrides in fields:
            return target
    raise BackendError(
        f"this cluster's {name} has none of {', '.join(TRAINJOB_OVERRIDES)}: torchdeck cannot place "
        "the volumes, /dev/shm, service account and labels in its pods",
        f"install one of {supported(kind)}",
    )


# -- checking an object against a schema, as the API server does on create ---------------

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def _type_ok(value: Any, schema: dict[str, Any]) -> bool:
    if value is None:
        return bool(schema.get("nullable"))
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    kind = schema.get("type")
    if kind is None:
        return True
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES.get(kind, object))


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.cel_unchecked = 0
        self._cel = _cel_environment()

    def walk(self, value: Any, schema: dict[str, Any], path: str, root: bool = False) -> None:
        where = path or "(object)"
        if not _type_ok(value, schema):
            self.problems.append(f"{where}: must be {schema.get('type', 'int or string')}, got {value!r:.60}")
            return
        if value is None:
            return
        if "enum" in schema and value not in schema["enum"]:
            self.problems.append(f"{where}: {value!r} is not one of {schema['enum']}")
        if isinstance(value, str):
            if "pattern" in schema and not re.search(schema["pattern"], value):
                self.problems.append(f"{where}: {value!r} does not match {schema['pattern']}")
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                self.problems.append(f"{where}: longer than {schema['maxLength']}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                self.problems.append(f"{where}: {value} is less than {schema['minimum']}")
            if "maximum" in schema and value > schema["maximum"]:
                self.problems.append(f"{where}: {value} is more than {schema['maximum']}")
        if isinstance(value, list):
            if "maxItems" in schema and len(value) > schema["maxItems"]:
                self.problems.append(f"{where}: more than {schema['maxItems']} items")
            if "minItems" in schema and len(value) < schema["minItems"]:
                self.problems.append(f"{where}: fewer than {schema['minItems']} items")
            for i, item in enumerate(value):
                self.walk(item, schema.get("items") or {}, f"{path}[{i}]")
        if isinstance(value, dict):
            self._object(value, schema, path, root)
        self._rules(value, schema, where)

    def _object(self, value: dict[str, Any], schema: dict[str, Any], path: str, root: bool) -> None:
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        implicit = {"apiVersion", "kind", "metadata"} if root or schema.get("x-kubernetes-embedded-resource") else set()
        for key in schema.get("required", ()):
            if key not in value:
                self.problems.append(f"{path + '.' if path else ''}{key}: required")
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if props is not None and key in props:
                if not (root and key == "metadata"):  # the API server checks ObjectMeta itself
                    self.walk(item, props[key], sub)
            elif isinstance(extra, dict):
                self.walk(item, extra, sub)
            elif key in implicit or extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                continue
            elif props is not None:
                self.problems.append(f"{sub}: unknown field (this release of the CRD would drop it)")

    def _rules(self, value: Any, schema: dict[str, Any], where: str) -> None:
        for rule in schema.get("x-kubernetes-validations") or ():
            if "oldSelf" in rule.get("rule", ""):
                continue  # transition rules apply to updates only
            if self._cel is None:
                self.cel_unchecked += 1
                continue
            ok = self._cel(rule["rule"], value)
            if ok is None:
                self.cel_unchecked += 1
            elif not ok:
                self.problems.append(f"{where}: {rule.get('message') or 'fails the rule ' + rule['rule']}")


def _cel_environment() -> Any:
    """A CEL evaluator (cel-python) where it is installed, else None."""
    try:
        import celpy
    except ImportError:
        return None
    env = celpy.Environment()

    @functools.cache
    def program(rule: str) -> Any:
        return env.program(env.compile(rule))

    def evaluate(rule: str, value: Any) -> bool | None:
        try:
            return bool(program(rule).evaluate({"self": celpy.json_to_cel(value)}))
        except Exception:  # a Kubernetes-only CEL function cel-python lacks: not checked here
            return None

    return evaluate


@dataclass
class CheckResult:
    problems: list[str]
    cel_unchecked: int
    """CEL rules that could not be evaluated here (cel-python missing, or a Kubernetes-only function)."""


def check(obj: dict[str, Any], schema: dict[str, Any]) -> CheckResult:
    """Everything the API server would refuse in ``obj`` on create, and every field it would
    prune, one line each, against ``schema`` (a CRD version's openAPIV3Schema)."""
    checker = _Checker()
    checker.walk(obj, schema, "", root=True)
    return CheckResult(checker.problems, checker.cel_unchecked)
