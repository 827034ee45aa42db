"""What a storage create is asked for, checked before anything reaches AWS: the plan
(EFS, FSx for Lustre or none, and the model bucket), its prices, and every field's check."""

from __future__ import annotations

from dataclasses import dataclass

from ...trainer.s3url import S3Url
from ..errors import SpecError
from ..names import (
    check_bucket_name,
    check_cluster_name,
    check_namespace,
    check_object_name,
    check_s3_prefix,
    check_service_account,
)

EFS_PER_GB_MONTH = 0.30
HOURS_PER_MONTH = 730.0
FSX_DEPLOYMENTS: dict[str, dict[int | None, float]] = {
    # deployment type -> {per-unit throughput (MB/s/TiB), or None: $ per GB-month}
    "SCRATCH_1": {None: 0.140},
    "SCRATCH_2": {None: 0.140},
    "PERSISTENT_1": {50: 0.145, 100: 0.210, 200: 0.290},
    "PERSISTENT_2": {125: 0.145, 250: 0.210, 500: 0.340, 1000: 0.600},
}


@dataclass
class StoragePlan:
    """What ``torchdeck storage create`` makes for one cluster."""

    cluster: str
    region: str
    kind: str = "efs"
    """efs, fsx, or none (a bucket only)."""
    fsx_deployment: str = "SCRATCH_2"
    fsx_capacity_gib: int = 1200
    fsx_throughput: int | None = None
    """PERSISTENT_1/2 only: MB/s per TiB (default: the smallest)."""
    fsx_s3_link: str | None = None
    """s3://bucket[/prefix] the file system imports from and exports to (SCRATCH_1/2, PERSISTENT_1)."""
    bucket: str | None = None
    """The bucket for models; made if absent."""
    prefix: str = "models/"
    namespace: str = "default"
    pvc: str = "shared"
    service_account: str = "torchdeck-s3"
    size: str = "100Gi"
    """The claim's nominal size (EFS grows as it is filled; FSx is the file system's capacity)."""

    @property
    def fsx_per_hour(self) -> float:
        rates = FSX_DEPLOYMENTS[self.fsx_deployment]
        rate = rates.get(self.fsx_throughput if self.fsx_deployment.startswith("PERSISTENT") else None) or 0.0
        return self.fsx_capacity_gib * rate / HOURS_PER_MONTH


def split_s3(url: str, field_name: str) -> tuple[str, str]:
    """A bucket prefix a user gave (``--fsx-s3-link``), its bucket checked by S3's rules."""
    try:
        location = S3Url.parse(url)
    except ValueError as exc:
        raise SpecError(field_name, str(exc), "e.g. s3://my-bucket/cifar10/") from None
    check_bucket_name(location.bucket, field_name)
    return location.bucket, location.key


def validate_storage(plan: StoragePlan) -> StoragePlan:
    """Every field checked, with the reason: a bad plan never reaches AWS."""
    check_cluster_name(plan.cluster, "--cluster")
    if plan.kind not in ("efs", "fsx", "none"):
        raise SpecError("--kind", f"must be efs, fsx or none, got {plan.kind!r}")
    if plan.kind == "none" and not plan.bucket:
        raise SpecError("--bucket", "nothing to make: no file system and no bucket", "give --bucket, or --kind efs")
    if plan.kind == "fsx":
        rates = FSX_DEPLOYMENTS.get(plan.fsx_deployment)
        if rates is None:
            raise SpecError(
                "--fsx-deployment", f"must be one of {', '.join(FSX_DEPLOYMENTS)}, got {plan.fsx_deployment!r}"
            )
        cap = plan.fsx_capacity_gib
        step = 3600 if plan.fsx_deployment == "SCRATCH_1" else 2400
        if cap < 1200 or (cap not in (1200, 2400) and cap % step):
            raise SpecError(
                "--fsx-capacity",
                f"{cap} GiB is not a capacity {plan.fsx_deployment} offers",
                f"1200, 2400 or a multiple of {step} GiB",
            )
        if plan.fsx_deployment.startswith("PERSISTENT"):
            plan.fsx_throughput = plan.fsx_throughput or min(k for k in rates if k)
            if plan.fsx_throughput not in rates:
                raise SpecError(
                    "--fsx-throughput",
                    f"{plan.fsx_deployment} offers "
                    f"{', '.join(str(k) for k in rates)} MB/s per TiB, not {plan.fsx_throughput}",
                )
        elif plan.fsx_throughput:
            raise SpecError(
                "--fsx-throughput",
                f"{plan.fsx_deployment} has a fixed throughput",
                "use PERSISTENT_1 or PERSISTENT_2 to choose one",
            )
        if plan.fsx_s3_link:
            split_s3(plan.fsx_s3_link, "--fsx-s3-link")
            if plan.fsx_deployment == "PERSISTENT_2":
                raise SpecError(
                    "--fsx-s3-link",
                    "PERSISTENT_2 links to S3 through data repository associations",
                    "use SCRATCH_2 or PERSISTENT_1 for a linked bucket",
                )
    if plan.bucket:
        check_bucket_name(plan.bucket)
    plan.prefix = check_s3_prefix(plan.prefix, "--prefix")
    check_object_name(plan.pvc, "--pvc", "claim name")
    check_namespace(plan.namespace, "--namespace")
    check_service_account(plan.service_account, "--service-account")
    return plan
