"""The one door to AWS and EKS for the screens and the CLI: clusters
(catalogue, preflight, create, connect, status, delete, token), their
storage, the training image, models in S3, and what torchdeck made (the
ledger, and the teardown that empties it). Callers hold an ``EksCloud`` and
never a boto3 or Kubernetes client; long steps are async iterators of
``Progress`` whose last event carries a typed result."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from ...trainer.s3url import S3Url
from ..errors import BackendError
from ..ledger import Ledger, Resource
from ..names import check_cluster_name
from .access import ClusterRecord, KubeFactory
from .progress import Progress

if TYPE_CHECKING:
    from ..kubernetes.client import KubeClient
    from ..spec import JobSpec
    from .cluster import ClusterState
    from .image_plan import BuildContext, ImagePlan
    from .plan import ClusterPlan
    from .preflight import Catalogue, PreflightReport
    from .session import AwsSession
    from .storage_plan import StoragePlan
    from .storage_state import StorageState
    from .teardown import Step

POLL_S = 15.0


class EksCloud:
    """AWS and EKS for one state folder (its cluster records and ledger) and one AWS profile.
    ``kube(kubeconfig, context)`` makes the Kubernetes client for a cluster (default: the kubernetes
    backend on that context; tests pass kmock's)."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        profile: str | None = None,
        poll_s: float = POLL_S,
        kube: KubeFactory | None = None,
    ):
        self.state_dir = Path(state_dir)
        self.profile = profile
        self.poll_s = poll_s
        self.kube_factory = kube
        self._sessions: dict[str, AwsSession] = {}

    def session(self, region: str | None) -> AwsSession:
        """One boto3 session per region, with the profile."""
        from .session import AwsSession

        key = region or ""
        if key not in self._sessions:
            self._sessions[key] = AwsSession(region or None, self.profile)
        return self._sessions[key]

    # -- the clusters torchdeck knows ---------------------------------------------------

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.state_dir)

    def clusters(self) -> list[ClusterRecord]:
        """Every cluster torchdeck keeps a record of and has not deleted."""
        return ClusterRecord.all(self.state_dir)

    def only_cluster(self) -> ClusterRecord | None:
        """The cluster torchdeck knows where it knows exactly one (what forms start with)."""
        known = self.clusters()
        return known[0] if len(known) == 1 else None

    def record(self, name: str, region: str | None = None) -> ClusterRecord:
        """The cluster's record (a new one where torchdeck has none yet); the region from the record
        where not given."""
        check_cluster_name(name, "cluster")
        known = ClusterRecord.load(self.state_dir, name)
        region = region or (known.region if known else None)
        if not region:
            raise BackendError(f"which region is cluster {name} in?", "pass --region")
        return ClusterRecord.open(self.state_dir, name, region)

    def pick_cluster(self, name: str | None, region: str | None = None) -> ClusterRecord:
        """The named cluster, or the only one torchdeck knows."""
        if not name:
            known = [r.name for r in self.clusters()]
            if len(known) != 1:
                raise BackendError(
                    "which cluster?" + (f" torchdeck knows {', '.join(known)}" if known else ""),
                    "pass --cluster NAME (and --region)",
                )
            name = known[0]
        return self.record(name, region)

    def kube(self, record: ClusterRecord) -> KubeClient:
        """The connection to the cluster's API on its context (connecting first where there is none)."""
        from .access import cluster_kube

        return cluster_kube(record, self.session(record.region), self.kube_factory).client

    # -- cluster --------------------------------------------------------------------------

    def catalogue(self, region: str, zones: list[str] | None = None) -> Catalogue:
        """The instance types the region's zones offer, from EC2 (with prices where known)."""
        from .preflight import live_catalogue

        return live_catalogue(self.session(region), zones)

    def preflight(self, plan: ClusterPlan) -> PreflightReport:
        from .preflight import preflight

        return preflight(self.session(plan.region), plan)

    def pick_path(self, requested: str | None = None) -> tuple[str, str | None]:
        """(path, eksctl binary): eksctl where it is on the PATH (or asked for), else native."""
        from .create import pick_path

        return pick_path(requested)

    def create_cluster(
        self, plan: ClusterPlan, plan_file: Path, path: str, eksctl: str | None = None, kubeconfig: Path | None = None
    ) -> AsyncIterator[Progress]:
        """The create on ``path`` (eksctl or native: ``pick_path``); ends with ``ClusterReady``."""
        from .create import create_cluster

        return create_cluster(
            self.session(plan.region), plan, plan_file, self.state_dir, path, eksctl, kubeconfig, poll_s=self.poll_s
        )

    def connect(
        self, name: str, region: str, kubeconfig: Path | None = None, use_aws_cli: bool = False
    ) -> tuple[Path, str]:
        """Write the cluster's context into the kubeconfig; (file, context)."""
        from .access import connect

        check_cluster_name(name, "cluster")
        path, context = connect(self.session(region), name, kubeconfig, use_aws_cli)
        record = ClusterRecord.load(self.state_dir, name)
        if record is not None:
            record.kubeconfig, record.context = str(path), context
            record.save()
        return path, context

    def cluster_state(self, name: str, region: str) -> ClusterState:
        """The cluster as AWS sees it, and its nodes as Kubernetes does where torchdeck has a context."""
        from .cluster import cluster_state

        record = ClusterRecord.load(self.state_dir, name)
        kube = self.kube(record) if record is not None and record.context else None
        return cluster_state(self.session(region), name, record, kube)

    def delete_cluster(self, name: str, region: str) -> AsyncIterator[Progress]:
        from .cluster import delete_cluster
        from .create import eksctl_path

        return delete_cluster(self.session(region), name, self.record(name, region), eksctl_path(), poll_s=self.poll_s)

    def token(self, name: str, region: str) -> dict[str, object]:
        """An ExecCredential for kubectl."""
        from .access import eks_token

        check_cluster_name(name, "cluster")
        return eks_token(self.session(region), name)

    # -- storage --------------------------------------------------------------------------

    def create_storage(self, plan: StoragePlan) -> AsyncIterator[Progress]:
        """EFS or FSx, the claim and the bucket; ends with ``StorageReady``."""
        from .storage import create_storage

        return create_storage(
            self.session(plan.region),
            plan,
            self.record(plan.cluster, plan.region),
            kube=self.kube_factory,
            poll_s=self.poll_s,
        )

    def storage_state(self, record: ClusterRecord) -> StorageState:
        from .storage_state import storage_state

        kube = self.kube(record) if record.context else None
        return storage_state(self.session(record.region), record, kube)

    def storage_settings(self, record: ClusterRecord) -> dict[str, str]:
        """What a job spec needs to use the cluster's storage (from its last storage create)."""
        from .storage import spec_settings

        return spec_settings(record)

    def storage_steps(self, record: ClusterRecord, keep_bucket: bool = False) -> list[Step]:
        """What ``storage delete`` would take, in order."""
        from .teardown import storage_steps

        return storage_steps(self.ledger, record.name, keep_bucket)

    def delete_storage(self, record: ClusterRecord, steps: list[Step]) -> AsyncIterator[Progress]:
        """Run the storage steps, then forget the storage choices."""

        async def run() -> AsyncIterator[Progress]:
            async for p in self.teardown(steps):
                yield p
            record.storage = None
            record.save()

        return run()

    # -- image ----------------------------------------------------------------------------

    def build_context(self) -> BuildContext:
        """What a build here would use: the Docker engine (if one answers) and the context's tag."""
        from .image_plan import build_context

        return build_context()

    def build_image(self, plan: ImagePlan, push: bool = True) -> AsyncIterator[Progress]:
        """Repository, build (docker here, else Kaniko in the cluster), push; ends with ``ImageRef``."""
        from .image import build_image

        return build_image(
            self.session(plan.region),
            plan,
            self.record(plan.cluster, plan.region),
            push=push,
            kube=self.kube_factory,
            poll_s=min(self.poll_s, 2.0),
        )

    def push_image(self, plan: ImagePlan) -> AsyncIterator[Progress]:
        from .image_docker import push_image

        return push_image(self.session(plan.region), plan, self.record(plan.cluster, plan.region))

    # -- models ---------------------------------------------------------------------------

    def download(self, url: str, out: Path, region: str | None = None) -> None:
        """Copy s3://BUCKET/KEY to ``out`` (whole, or not at all)."""
        try:
            location = S3Url.parse_file(url)
        except ValueError as exc:
            raise BackendError(str(exc), "e.g. s3://my-bucket/models/model.pt") from None
        bucket, key = location.bucket, location.key
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, part = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".part")  # exclusive, never planted
        os.close(fd)
        try:
            self.session(region).call("s3", "download_file", Bucket=bucket, Key=key, Filename=part)
            os.replace(part, out)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(part)

    def model_prefix(self, spec: JobSpec) -> str:
        """The model prefix of the bucket beside the run's volume: the cluster whose storage made the
        claim (and service account) the run's spec names, never just the first cluster with a bucket."""
        c = spec.cluster
        choices = [(r, r.storage) for r in self.clusters() if r.storage is not None and r.storage.bucket]
        matching = [
            (r, s)
            for r, s in choices
            if s.pvc == c.pvc
            and s.namespace == spec.namespace
            and (not c.service_account or s.service_account == c.service_account)
        ]
        if len(matching) == 1:
            choice = matching[0][1]
            assert choice.bucket is not None
            return str(S3Url(choice.bucket, choice.prefix).join("models"))
        if matching:
            names = ", ".join(sorted(r.name for r, _ in matching))
            raise BackendError(
                f"the claim {c.pvc} in {spec.namespace} belongs to several clusters' storage ({names})",
                "pass --via s3://BUCKET/PREFIX",
            )
        raise BackendError(
            f"the model is on the volume of claim {c.pvc or '(none)'} in {spec.namespace}, and no "
            "bucket torchdeck made sits beside that claim",
            "make one (torchdeck storage create --bucket NAME --spec) or pass --via s3://BUCKET/PREFIX",
        )

    # -- what torchdeck made --------------------------------------------------------------

    def resources(self, live_only: bool = True, scope: str | None = None) -> list[Resource]:
        """The ledger's rows in teardown order."""
        from .teardown import in_teardown_order

        return in_teardown_order(self.ledger.resources(live_only=live_only, scope=scope))

    def costs(self) -> tuple[float, float]:
        """(per hour of what exists now, so far of everything recorded)."""
        return self.ledger.costs()

    def cleanup_plan(
        self,
        scope: str | None = None,
        regions: tuple[str, ...] | None = None,
        keep_buckets: bool = False,
        kinds: tuple[str, ...] | None = None,
    ) -> list[Step]:
        """The teardown plan from the ledger, plus what is tagged ``torchdeck:cluster`` in ``regions``
        (None: look for no orphans)."""
        from .teardown import find_orphans, plan_cleanup

        rows = self.ledger.resources(scope=scope)
        found: dict[tuple[str, str], Resource] = {}
        for region in sorted(regions or ()):  # IAM is global: a role found from two regions is one role
            for orphan in asyncio.run(find_orphans(self.session(region))):
                found.setdefault((orphan.kind, orphan.ident), orphan)
        return plan_cleanup(rows, list(found.values()), scope=scope, keep_buckets=keep_buckets, kinds=kinds)

    def teardown(self, steps: list[Step]) -> AsyncIterator[Progress]:
        """Run a plan in order; ends with ``TeardownDone``."""
        from .create import eksctl_path
        from .teardown import Teardown

        return Teardown(self.state_dir, aws_for=self.session, eksctl=eksctl_path(), poll_s=self.poll_s).run(steps)
