"""Checking rendered manifests before anything is applied: core kinds
(Job, Service, Deployment) against Kubernetes' own OpenAPI schema through
kubernetes-validate, custom kinds against the schemas in
``manifests/schemas/``, and the pod templates inside custom kinds as
``v1/PodTemplate`` objects, so a misspelt pod field is caught there too.

kubernetes-validate carries every Kubernetes release's schema (about 100 MB),
so it is optional: ``torchdeck render --validate`` says how to install it."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from .errors import BackendError
from .manifests import Rendered

KUBERNETES_VERSION = "1.31.0"
"""The schema release checked against (EKS's default line in 2026)."""
TEMPLATE_PATHS = {
    "PyTorchJob": ("spec", "pytorchReplicaSpecs"),
    "MPIJob": ("spec", "mpiReplicaSpecs"),
    "ElasticJob": ("spec", "replicaSpecs"),
}
CUSTOM_SCHEMAS = {"PyTorchJob": "pytorchjob", "MPIJob": "mpijob", "TrainJob": "trainjob", "ElasticJob": "elasticjob"}


@functools.lru_cache(maxsize=None)
def _custom_schema(name: str) -> dict[str, Any]:
    return json.loads((resources.files("torchdeck") / "manifests" / "schemas" / f"{name}.schema.json").read_text())


def _core_validator():
    try:
        import kubernetes_validate
    except ImportError:
        raise BackendError("validating manifests needs the kubernetes-validate package",
                           "pip install kubernetes-validate (it carries Kubernetes' schemas, ~100 MB)") from None
    return kubernetes_validate


def _core_problems(kv, obj: dict[str, Any], where: str) -> list[str]:
    try:
        kv.validate(obj, KUBERNETES_VERSION, strict=True)
    except kv.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        return [f"{where}: {path + ': ' if path else ''}{exc.message}"]
    except (kv.SchemaNotFoundError, kv.InvalidSchemaError) as exc:
        return [f"{where}: no schema to check it against ({exc})"]
    return []


def validate_manifests(rendered: Rendered) -> list[str]:
    """Every problem found, one line each (an empty list: all valid)."""
    import jsonschema

    kv = _core_validator()
    problems: list[str] = []
    for obj in rendered.objects:
        kind = obj.get("kind", "?")
        where = f"{kind}/{obj.get('metadata', {}).get('name', '?')}"
        schema = CUSTOM_SCHEMAS.get(kind)
        if schema is None:
            problems += _core_problems(kv, obj, where)
            continue
        validator = jsonschema.Draft202012Validator(_custom_schema(schema))
        for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.path)):
            path = ".".join(str(p) for p in error.path)
            problems.append(f"{where}: {path + ': ' if path else ''}{error.message}")
        node = obj
        for key in TEMPLATE_PATHS.get(kind, ()):
            node = node.get(key, {}) if isinstance(node, dict) else {}
        for role, replica in (node.items() if isinstance(node, dict) else ()):
            template = replica.get("template") if isinstance(replica, dict) else None
            if template is not None:
                wrapped = {"apiVersion": "v1", "kind": "PodTemplate",
                           "metadata": {"name": f"{obj['metadata']['name']}-{role.lower()}"}, "template": template}
                problems += _core_problems(kv, wrapped, f"{where} {role} pod template")
    return problems
