"""Which pods are a run's: those its job owns, through the owner chain the controllers write.

A label says nothing of who made a pod: anyone who may create pods in the namespace can give one
``torchdeck.dev/run=ID``, and its lines would become a rank's metrics, errors, triage dumps and the
health gate's answer. The operators set ``metadata.ownerReferences`` (uid included) on what they
make: the Training Operator and the MPI Operator on the pods (the MPI launcher through a batch Job),
Kubeflow Trainer through a JobSet and its Jobs, a plain Job on its pods. A pod is the run's where
that chain reaches the job's uid. (A pod is a rank only through its owner chain: STYLE 27.)"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from ..errors import BackendError
from .client import ApiError, ApiKind, KubeClient, api_path
from .objects import ObjectMeta, OwnerRef, Pod

MAX_DEPTH = 3
"""TrainJob -> JobSet -> Job -> Pod is the longest chain the operators make."""
BETWEEN: dict[tuple[str, str], ApiKind] = {
    ("batch", "Job"): ApiKind("apis/batch/v1", "jobs"),
    ("jobset.x-k8s.io", "JobSet"): ApiKind.of_group("jobset.x-k8s.io", "v1alpha2", "jobsets"),
}
"""The kinds that stand between a job and its pods (read to follow the chain); no other is fetched."""


class OwnedBy:
    """Whether a pod (or any object) of one namespace is owned, directly or through the kinds
    between, by the job whose uid is ``uid``. What it learns of an owner is kept: the pods of a run
    share a handful of owners, so a run of 1,024 pods costs a few requests, once."""

    def __init__(self, client: KubeClient, namespace: str, uid: str):
        self.client, self.namespace, self.uid = client, namespace, uid
        self._leads: dict[str, bool] = {uid: True}
        self._lock = threading.Lock()
        self.unread = ""
        """An owner between the job and its pods that this identity may not read (its kind), where one was."""

    def __call__(self, obj: Pod | Mapping[str, object]) -> bool:
        """Whether the job owns ``obj`` (a pod's view, or an object as the API answered it)."""
        return self._owned(obj.meta if isinstance(obj, Pod) else ObjectMeta.from_api(obj), 0) is True

    def _owned(self, meta: ObjectMeta, depth: int) -> bool | None:
        """True: owned by the job; False: not; None: not known now (an owner could not be read)."""
        unknown = False
        for ref in meta.controllers():
            uid = ref.uid
            with self._lock:
                known = self._leads.get(uid)
            if known is None:
                known = self._through(ref, depth) if depth < MAX_DEPTH else False
                if known is None:
                    unknown = True  # asked again next time
                    continue
                with self._lock:
                    self._leads[uid] = known
            if known:
                return True
        return None if unknown else False

    def _through(self, ref: OwnerRef, depth: int) -> bool | None:
        """Whether the owner ``ref`` names (a kind between a job and its pods) is owned by the job;
        None where the API could not say now (a failure, or forbidden: said in ``unread``)."""
        api_version, kind, name = ref.api_version, ref.kind, ref.name
        if not name:
            return False
        api = BETWEEN.get((api_version.rpartition("/")[0], kind))
        if api is None:
            return False
        try:
            owner = self.client.request("GET", api_path(api, self.namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return False  # gone: not the run's
            if exc.status == 403:
                self.unread = kind
            return None
        except BackendError:
            return None  # out of reach now
        meta = ObjectMeta.from_api(owner if isinstance(owner, Mapping) else {})
        if meta.uid != ref.uid:
            return False
        return self._owned(meta, depth + 1)
