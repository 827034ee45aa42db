"""The training job kinds, one table (``JOB_KINDS``): for each, where the API server keeps it
(group, version, plural: the client's paths come from here), its operator and how to install it,
the label its controller gives the job's pods, where it keeps its suspend flag (Kueue and budget
stops) and whether Kueue can queue it. The renderer, the client's paths, the preflight, the state
readers and the queue code all read this table; nothing else lists the kinds' facts.
(lightkube's resource classes.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..spec import KINDS, JobKindName
from .client import ApiKind

MPI_SSH_DIR = "/home/trainer/.ssh"
"""Where the MPI Operator mounts the SSH keys: the home of the images' uid-1000
user (the operator's default, /root/.ssh, is not that user's)."""
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


@dataclass(frozen=True)
class JobKind:
    """One training job kind: what it is on the API server, and what it needs there."""

    key: JobKindName
    """torchdeck's name (``cluster.kind``)."""
    group: str
    version: str
    plural: str
    kind: str
    operator: str
    """What to install when its CRD is missing."""
    install: str
    warning: str = ""
    """Said with every render of it."""
    pod_label: str = ""
    """The label its controller puts on the job's pods, with the job's name (seen on the real Training
    Operator v1.9.4, MPI Operator v0.8.2, Kubernetes 1.34 and JobSet v0.12.0); empty: none known."""
    suspend_at: tuple[str, ...] = ()
    """Where the job keeps its suspend flag (empty: it cannot be suspended)."""
    queued: bool = True
    """Whether Kueue can queue it."""
    beside: tuple[str, ...] = ()
    """The kinds torchdeck makes beside the job for it (its template's other objects), which
    ``stop`` deletes with it: nothing else is listed, so a namespace's user needs no other rights."""

    @property
    def api(self) -> ApiKind:
        """Where the API server keeps it: ``client.api_path`` takes this."""
        return ApiKind.of_group(self.group, self.version, self.plural)

    @property
    def builtin(self) -> bool:
        """A kind Kubernetes serves itself (no CRD, no operator)."""
        return self.group == "batch"

    @property
    def kueue_framework(self) -> str:
        """Kueue's name of the kind in its configuration's ``integrations.frameworks``."""
        return f"{self.group}/{self.kind.lower()}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    def suspend_patch(self) -> dict[str, Any] | None:
        """The merge patch that suspends a job of this kind (its pods are deleted, the job kept)."""
        if not self.suspend_at:
            return None
        patch: dict[str, Any] = {self.suspend_at[-1]: True}
        for part in reversed(self.suspend_at[:-1]):
            patch = {part: patch}
        return patch

    def is_suspended(self, obj: dict[str, Any]) -> bool:
        """Whether the job is held suspended, where this kind keeps the flag."""
        value: Any = obj
        for part in self.suspend_at:
            value = value.get(part) if isinstance(value, dict) else None
        return bool(value) if self.suspend_at else False


RUN_POLICY_SUSPEND = ("spec", "runPolicy", "suspend")
SPEC_SUSPEND = ("spec", "suspend")
JOB_KINDS: dict[JobKindName, JobKind] = {
    "pytorchjob": JobKind(
        "pytorchjob",
        "kubeflow.org",
        "v1",
        "pytorchjobs",
        "PyTorchJob",
        "the Kubeflow Training Operator v1",
        'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=v1.9.4"',
        pod_label="training.kubeflow.org/job-name",
        suspend_at=RUN_POLICY_SUSPEND,
    ),
    "trainjob": JobKind(
        "trainjob",
        "trainer.kubeflow.org",
        "v1alpha1",
        "trainjobs",
        "TrainJob",
        "Kubeflow Trainer v2",
        'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/'
        'manifests/overlays/manager?ref=v2.3.0", then the same with overlays/runtimes',
        "TrainJob: the pods' security context comes from the ClusterTrainingRuntime, not from torchdeck",
        pod_label=JOBSET_NAME_LABEL,
        suspend_at=SPEC_SUSPEND,
    ),
    "mpijob": JobKind(
        "mpijob",
        "kubeflow.org",
        "v2beta1",
        "mpijobs",
        "MPIJob",
        "the Kubeflow MPI Operator",
        "kubectl apply --server-side -f https://raw.githubusercontent.com/kubeflow/mpi-operator/"
        "v0.8.2/deploy/v2beta1/mpi-operator.yaml",
        "MPIJob: the image needs OpenMPI and an SSH server that runs as uid 1000 with its keys "
        f"in {MPI_SSH_DIR}, as torchdeck image build --mpi makes it",
        pod_label="training.kubeflow.org/job-name",
        suspend_at=RUN_POLICY_SUSPEND,
    ),
    "job": JobKind(
        "job",
        "batch",
        "v1",
        "jobs",
        "Job",
        "nothing (built into Kubernetes)",
        "",
        pod_label="batch.kubernetes.io/job-name",
        suspend_at=SPEC_SUSPEND,
        beside=("Service",),  # the headless Service that names the pods for the rendezvous
    ),
    "elasticjob": JobKind(
        "elasticjob",
        "elastic.pytorch.org",
        "v1alpha1",
        "elasticjobs",
        "ElasticJob",
        "the TorchElastic controller (v0.2.2, 2022, unmaintained)",
        "none works on Kubernetes 1.22 or later: its CRD is apiextensions.k8s.io/v1beta1, "
        "which 1.22 removed; use --kind pytorchjob with cluster.min_nodes and "
        "cluster.max_nodes (the same elastic job), or --kind job",
        "ElasticJob: the TorchElastic controller's CRD is apiextensions.k8s.io/v1beta1, which "
        "Kubernetes removed in 1.22 (EKS's oldest supported release is newer), so it installs on "
        "no current cluster; torchdeck submits it only where the cluster already serves it. "
        "The same elastic job: --kind pytorchjob with cluster.min_nodes and cluster.max_nodes",
        queued=False,
        beside=("Deployment", "Service", "NetworkPolicy"),  # its etcd
    ),
}
assert tuple(JOB_KINDS) == KINDS, "every kind of the spec has its row"
KEY_BY_KIND: dict[str, JobKindName] = {k.kind: key for key, k in JOB_KINDS.items()}
"""A job object's ``kind`` (PyTorchJob) -> torchdeck's name of it (pytorchjob)."""


def job_kind_of(obj: dict[str, Any]) -> JobKind | None:
    """The row of a job object (None: not a training job kind)."""
    key = KEY_BY_KIND.get(str(obj.get("kind", "")))
    return JOB_KINDS[key] if key else None
