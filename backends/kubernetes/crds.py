"""The operators' own CustomResourceDefinitions, kept as they publish them in
``manifests/crds/`` (``SOURCES.json`` says where each came from;
``manifests/crds/refresh.py`` refreshes them), and a check of an object
against one as the API server makes it on create.

A CRD drops a field its schema does not name without a word (structural
pruning), so a manifest written for another release of an operator starts
without its volumes or labels and nobody is told. ``check`` therefore calls
every field the schema would prune an error, besides types, required fields,
enums, patterns, sizes and the CEL rules that apply on create.

``Target`` is one operator release torchdeck renders a kind for; each kind lists its own
(``kinds.JobKind.targets``), and the releases the real cluster runs come from
``manifests/versions.toml`` (``operator_releases``)."""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads it with the same parser's backport
    import tomli as tomllib

from .objects import Api as Json
from .objects import as_list, as_map  # a CRD, a schema, an object checked against one


@dataclass(frozen=True)
class Target:
    """One operator release that torchdeck renders a kind for."""

    release: str
    crd_file: str
    """The CRD as that release publishes it, in manifests/crds/."""
    version: str
    """The API version rendered (the group is the CRD's)."""
    pod_overrides: str = ""
    """TrainJob only: where the job's pod settings go in this release."""


@functools.cache
def operator_releases() -> dict[str, str]:
    """The operators' releases the real test cluster runs (``[operators]`` of manifests/versions.toml,
    declared once: the cluster tool and the docs' tests read the same file), by component."""
    text = (resources.files("torchdeck") / "manifests" / "versions.toml").read_text()
    return {str(k): str(v) for k, v in tomllib.loads(text)["operators"].items()}


@functools.cache
def crd(file: str) -> Json:
    """A CRD from manifests/crds/, parsed once."""
    text = (resources.files("torchdeck") / "manifests" / "crds" / file).read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    found: Json = next(d for d in yaml.load_all(text, Loader=loader) if d)
    return found


def sources() -> dict[str, dict[str, str]]:
    """Where each CRD file came from: repository, ref, commit, path, sha256."""
    found: dict[str, dict[str, str]] = json.loads(
        (resources.files("torchdeck") / "manifests" / "crds" / "SOURCES.json").read_text()
    )
    return found


def served_versions(definition: Json) -> list[str]:
    """The API versions a CRD object serves (apiextensions v1, or the v1beta1 form)."""
    spec = as_map(definition.get("spec"))
    versions = [as_map(v) for v in as_list(spec.get("versions"))]
    if versions:
        return [str(v["name"]) for v in versions if v.get("served", True)]
    return [str(spec["version"])] if spec.get("version") else []


def schema_of(definition: Json, version: str) -> Json | None:
    """The openAPIV3Schema a CRD object gives ``version`` (None where it gives none)."""
    spec = as_map(definition.get("spec"))
    for v in map(as_map, as_list(spec.get("versions"))):
        schema = as_map(as_map(v.get("schema")).get("openAPIV3Schema"))
        if v.get("name") == version and schema:
            return schema
    return as_map(as_map(spec.get("validation")).get("openAPIV3Schema")) or None


def target_schema(target: Target) -> Json:
    schema = schema_of(crd(target.crd_file), target.version)
    assert schema is not None, f"{target.crd_file} has no schema for {target.version}"
    return schema


def spec_fields(schema: Json) -> set[str]:
    """The fields a schema's ``spec`` names."""
    return set(as_map(as_map(as_map(schema.get("properties")).get("spec")).get("properties")))


# -- checking an object against a schema, as the API server does on create ---------------

_TYPES = {"object": Mapping, "array": list, "string": str, "boolean": bool}


def _type_ok(value: object, schema: Json) -> bool:
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
    return isinstance(value, _TYPES.get(str(kind), object))


def _size(schema: Json, key: str) -> float | None:
    """A numeric bound of the schema (maxLength, minimum...), where it gives one."""
    bound = schema.get(key)
    return bound if isinstance(bound, (int, float)) and not isinstance(bound, bool) else None


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.cel_unchecked = 0
        self._cel = CelRules.made()

    def walk(self, value: object, schema: Json, path: str, root: bool = False) -> None:
        where = path or "(object)"
        if not _type_ok(value, schema):
            self.problems.append(f"{where}: must be {schema.get('type', 'int or string')}, got {value!r:.60}")
            return
        if value is None:
            return
        enum = schema.get("enum")
        if isinstance(enum, list) and value not in enum:
            self.problems.append(f"{where}: {value!r} is not one of {enum}")
        if isinstance(value, str):
            self._string(value, schema, where)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            low, high = _size(schema, "minimum"), _size(schema, "maximum")
            if low is not None and value < low:
                self.problems.append(f"{where}: {value} is less than {schema['minimum']}")
            if high is not None and value > high:
                self.problems.append(f"{where}: {value} is more than {schema['maximum']}")
        if isinstance(value, list):
            most, least = _size(schema, "maxItems"), _size(schema, "minItems")
            if most is not None and len(value) > most:
                self.problems.append(f"{where}: more than {schema['maxItems']} items")
            if least is not None and len(value) < least:
                self.problems.append(f"{where}: fewer than {schema['minItems']} items")
            for i, item in enumerate(value):
                self.walk(item, as_map(schema.get("items")), f"{path}[{i}]")
        if isinstance(value, Mapping):
            self.as_map(value, schema, path, root)
        self._rules(value, schema, where)

    def _string(self, value: str, schema: Json, where: str) -> None:
        pattern, longest = schema.get("pattern"), _size(schema, "maxLength")
        if isinstance(pattern, str) and not re.search(pattern, value):
            self.problems.append(f"{where}: {value!r} does not match {pattern}")
        if longest is not None and len(value) > longest:
            self.problems.append(f"{where}: longer than {schema['maxLength']}")

    def as_map(self, value: Json, schema: Json, path: str, root: bool) -> None:
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        implicit = {"apiVersion", "kind", "metadata"} if root or schema.get("x-kubernetes-embedded-resource") else set()
        for key in as_list(schema.get("required")):
            if key not in value:
                self.problems.append(f"{path + '.' if path else ''}{key}: required")
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if isinstance(props, Mapping) and key in props:
                if not (root and key == "metadata"):  # the API server checks ObjectMeta itself
                    self.walk(item, as_map(props[key]), sub)
            elif isinstance(extra, Mapping):
                self.walk(item, extra, sub)
            elif key in implicit or extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                continue
            elif props is not None:
                self.problems.append(f"{sub}: unknown field (this release of the CRD would drop it)")

    def _rules(self, value: object, schema: Json, where: str) -> None:
        for rule in map(as_map, as_list(schema.get("x-kubernetes-validations"))):
            text = str(rule.get("rule", ""))
            if "oldSelf" in text:
                continue  # transition rules apply to updates only
            if self._cel is None:
                self.cel_unchecked += 1
                continue
            ok = self._cel.evaluate(text, value)
            if ok is None:
                self.cel_unchecked += 1
            elif not ok:
                self.problems.append(f"{where}: {rule.get('message') or 'fails the rule ' + text}")


class CelRules:
    """The CRDs' CEL rules, evaluated with cel-python (compiled once each)."""

    def __init__(self) -> None:
        import celpy  # optional (the test extras): ImportError where it is not installed

        self._celpy: Any = celpy  # cel-python has no type information: its objects are Any here
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}

    @classmethod
    @functools.cache
    def made(cls) -> CelRules | None:
        """The evaluator where cel-python is installed, else None."""
        try:
            return cls()
        except ImportError:
            return None

    def evaluate(self, rule: str, value: object) -> bool | None:
        """Whether ``value`` passes ``rule``; None where cel-python cannot say (a Kubernetes-only
        CEL function it lacks)."""
        try:
            if rule not in self._programs:
                self._programs[rule] = self._env.program(self._env.compile(rule))
            return bool(self._programs[rule].evaluate({"self": self._celpy.json_to_cel(value)}))
        except Exception:  # a Kubernetes-only CEL function cel-python lacks: not checked here
            return None


@dataclass
class CheckResult:
    problems: list[str]
    cel_unchecked: int
    """CEL rules that could not be evaluated here (cel-python missing, or a Kubernetes-only function)."""


def check(obj: Json, schema: Json) -> CheckResult:
    """Everything the API server would refuse in ``obj`` on create, and every field it would
    prune, one line each, against ``schema`` (a CRD version's openAPIV3Schema)."""
    checker = _Checker()
    checker.walk(obj, schema, "", root=True)
    return CheckResult(checker.problems, checker.cel_unchecked)
