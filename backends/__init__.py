"""All of torchdeck's I/O: the local (torchrun), kubernetes and eks backends.
Never imports textual; returns plain dataclasses and raises the project's own
errors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .errors import BackendError

if TYPE_CHECKING:
    from torchdeck.settings import Settings

    from .base import Backend

BACKENDS = ("local", "kubernetes", "eks")


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
        from .eks.access import ClusterRecord
        from .kubernetes.backend import KubernetesBackend

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
        from ..trainer.s3url import S3Url

        record = next((r for r in records if r.context == context), None)
        storage = record.storage if record else None
        bucket = str(S3Url(storage.bucket, storage.prefix.rstrip("/"))) if storage and storage.bucket else None
        from .eks.code_store import S3CodeStore
        from .eks.prices import SpotPrices

        return KubernetesBackend(
            kubeconfig,
            context,
            settings.namespace,
            ledger_dir=settings.state_dir,
            code_bucket=bucket,
            node_price_per_hour=settings.node_price_per_hour,
            spot_price=SpotPrices(record.region) if record and record.region else None,
            code_store=S3CodeStore(),
        )
    raise BackendError(f"unknown backend {name!r}", f"choose one of: {', '.join(BACKENDS)}")
