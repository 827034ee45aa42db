"""Checking rendered manifests before anything is applied: custom kinds
(PyTorchJob, TrainJob, MPIJob, ElasticJob) against the operators' own CRDs
(``crds``: types, required fields, enums, CEL rules, and every field the CRD
would prune), core kinds (Job, Service, Deployment) and the pod templates
inside custom kinds against Kubernetes' own OpenAPI schema through
kubernetes-validate, so a misspelt pod field is caught there too.

kubernetes-validate carries every Kubernetes release's schema (about 100 MB),
so it is optional: ``torchdeck render --validate`` says how to install it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

from ..errors import BackendError
from . import crds
from .kind_objects import at
from .kinds import job_kind_of
from .manifests import Rendered
from .objects import ObjectMeta

KUBERNETES_VERSION = "1.31.0"
"""The schema release checked against (EKS's default line in 2026)."""


@dataclass
class Validation:
    """What a check of rendered manifests found."""

    problems: list[str]
    """One line each; empty: all valid."""
    checked_against: list[str]
    """The upstream CRDs used, e.g. "TrainJob: Kubeflow Trainer v2.3.0 (kubeflow/trainer@658725bdae5c)"."""
    cel_unchecked: int = 0


def _core_validator() -> ModuleType:
    try:
        import kubernetes_validate
    except ImportError:
        raise BackendError(
            "validating manifests needs the kubernetes-validate package",
            "pip install kubernetes-validate (it carries Kubernetes' schemas, ~100 MB)",
        ) from None
    return kubernetes_validate


def _core_problems(kv: ModuleType, obj: Mapping[str, object], where: str) -> list[str]:
    try:
        kv.validate(obj, KUBERNETES_VERSION, strict=True)
    except kv.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        return [f"{where}: {path + ': ' if path else ''}{exc.message}"]
    except (kv.SchemaNotFoundError, kv.InvalidSchemaError) as exc:
        return [f"{where}: no schema to check it against ({exc})"]
    return []


def validate_manifests(rendered: Rendered) -> Validation:
    """Every problem found in ``rendered``, against the CRD of the release it was rendered for."""
    kv = _core_validator()
    result = Validation([], [])
    target = rendered.target
    for obj in rendered.objects:
        kind = obj.get("kind", "?")
        where = f"{kind}/{ObjectMeta.from_api(obj).name or '?'}"
        if target is None or obj is not rendered.main:  # built-in kinds, and what a job brings along
            result.problems += _core_problems(kv, obj, where)
            continue
        source = crds.sources()[target.crd_file]
        result.checked_against.append(f"{kind}: {target.release} ({source['repository']}@{source['commit'][:12]})")
        found = crds.check(obj, crds.target_schema(target))
        result.problems += [f"{where}: {line}" for line in found.problems]
        result.cel_unchecked += found.cel_unchecked
        kind_of = job_kind_of(obj)
        roles = at(obj, ("spec", kind_of.replicas_at)) if kind_of and kind_of.replicas_at else None
        for role, replica in roles.items() if isinstance(roles, Mapping) else ():
            template = at(replica, ("template",))
            if template is not None:
                wrapped = {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": f"{obj['metadata']['name']}-{str(role).lower()}"},
                    "template": template,
                }
                result.problems += _core_problems(kv, wrapped, f"{where} {role} pod template")
    return result
