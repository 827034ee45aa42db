"""All of torchdeck's I/O: the local (torchrun), kubernetes and eks backends.
Never imports textual; returns plain dataclasses and raises the project's own
errors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .errors import BackendError

if TYPE_CHECKING:
    from torchdeck.settings import Settings

    from .base import Backend, Plan
    from .capabilities import JobAdoption
    from .eks.access import ClusterRecord
    from .kubernetes.validation import Validation
    from .spec import JobSpec
    from .spec_options import Where

BACKENDS = ("local", "kubernetes", "eks")
FIELDS: dict[str, Where] = {"local": "local", "kubernetes": "cluster", "eks": "cluster"}
"""Each backend's ``Backend.fields``, known without opening it (tests/unit/test_capabilities.py
holds the two to each other)."""


def backend_fields(name: str) -> Where:
    """The spec fields the backend called ``name`` reads besides everyone's (``Backend.fields``)."""
    return FIELDS.get(name, "all")


def open_backend(name: str, settings: Settings) -> Backend:
    """The backend called ``name``; its module (and SDK) is imported only now."""
    if name == "local":
        from .local import LocalBackend

        return LocalBackend(settings.state_dir, local_price_per_hour=settings.local_price_per_hour)
    if name == "kubernetes":
        from .eks.code_store import S3CodeStore
        from .kubernetes.backend import KubernetesBackend

        return KubernetesBackend(
            settings.kubeconfig,
            settings.kube_context,
            settings.namespace,
            ledger_dir=settings.state_dir,
            node_price_per_hour=settings.node_price_per_hour,
            code_store=S3CodeStore(),  # a spec's own cluster.code_bucket (s3://) on any cluster
        )
    if name == "eks":  # the kubernetes backend on the context of a cluster torchdeck made
        from .eks.code_store import S3CodeStore
        from .eks.prices import SpotPrices
        from .kubernetes.backend import KubernetesBackend

        record, kubeconfig, context = eks_cluster(settings)
        return KubernetesBackend(
            kubeconfig,
            context,
            settings.namespace,
            ledger_dir=settings.state_dir,
            code_bucket=bucket_of(record),
            node_price_per_hour=settings.node_price_per_hour,
            spot_price=SpotPrices(record.region) if record and record.region else None,
            code_store=S3CodeStore(),
        )
    raise BackendError(f"unknown backend {name!r}", f"choose one of: {', '.join(BACKENDS)}")


def render_plan(spec: JobSpec, settings: Settings, run_id: str | None = None, release: str | None = None) -> Plan:
    """``torchdeck render``: the plan a cluster's submit makes, made offline (no cluster asked), with
    the code bucket the configured backend sends large bundles to."""
    from .kubernetes.backend import offline_plan

    try:
        bucket = code_bucket(settings)
    except BackendError as exc:  # the eks backend with no cluster connected: render still needs none
        plan = offline_plan(spec, run_id, release)
        plan.notes.append(f"no EKS cluster's bucket for a large code bundle ({exc.message})")
        return plan
    return offline_plan(spec, run_id, release, bucket)


def validate_plan(plan: Plan) -> Validation:
    """``render --validate``: a cluster plan's objects checked against the CRDs of the operator
    release they were rendered for (and Kubernetes' own schemas for the built-in kinds)."""
    from .kubernetes.manifests import Rendered
    from .kubernetes.validation import validate_manifests

    if not isinstance(plan.payload, Rendered):
        raise BackendError(f"a {plan.backend} plan has no objects to validate", "validate a cluster's plan (render)")
    return validate_manifests(plan.payload)


def job_adoption(settings: Settings) -> JobAdoption:
    """What reads a job in a cluster into a run of torchdeck's (``import KIND/NAME``): the configured
    backend's, or else the kubernetes backend's on the configured context."""
    from .capabilities import JobAdoption

    here = open_backend(settings.backend, settings)
    return here.capability(JobAdoption) or open_backend("kubernetes", settings).require(JobAdoption)


def eks_cluster(settings: Settings) -> tuple[ClusterRecord | None, str | Path | None, str | None]:
    """The EKS cluster torchdeck made that the eks backend works on (the context given, or the only
    one connected): its record, kubeconfig and context."""
    from .eks.access import ClusterRecord

    kubeconfig: str | Path | None = settings.kubeconfig
    context = settings.kube_context
    records = [r for r in ClusterRecord.all(settings.state_dir) if r.context]
    if not context:
        if len(records) != 1:
            raise BackendError(
                "which EKS cluster?"
                + (
                    f" torchdeck knows {', '.join(r.name for r in records)}"
                    if records
                    else " torchdeck has connected to none"
                ),
                "pass --context torchdeck-NAME, or torchdeck cluster connect --name NAME first",
            )
        kubeconfig, context = records[0].kubeconfig or kubeconfig, records[0].context
    return next((r for r in records if r.context == context), None), kubeconfig, context


def code_bucket(settings: Settings) -> str | None:
    """Where large code bundles go for the configured backend: the eks backend's cluster's bucket
    (its storage's prefix), None elsewhere (a spec's own cluster.code_bucket still counts)."""
    return bucket_of(eks_cluster(settings)[0]) if settings.backend == "eks" else None


def bucket_of(record: ClusterRecord | None) -> str | None:
    """The bucket (and prefix) of an EKS cluster's storage, where torchdeck made one for it."""
    from ..trainer.s3url import S3Url

    storage = record.storage if record else None
    return str(S3Url(storage.bucket, storage.prefix.rstrip("/"))) if storage and storage.bucket else None
