"""Issue 42: before a job is made, torchdeck asks the API server (SelfSubjectAccessReview) for every
verb it uses on what the job makes and reads. Against kmock, which answers an access review as the
API server does only where it implements authorisation; the real refusal (a role without a verb) is
tested on the real cluster (tests/cluster/test_real_kinds.py)."""

from __future__ import annotations

from kube_jobs import install, make_spec

from torchdeck.backends.kubernetes.access import access_findings, asked, resource_name
from torchdeck.backends.kubernetes.manifests import render


def test_the_accesses_asked_cover_what_the_job_makes_and_what_the_monitor_reads() -> None:
    rendered = render(make_spec(cluster={"kind": "job"}), "cifar10-1")
    needed = {(verb, resource_name(group, resource, sub)) for verb, group, resource, sub in asked(rendered)}
    assert {("create", "jobs.batch"), ("delete", "jobs.batch"), ("create", "services")} <= needed
    assert {("get", "pods/log"), ("list", "events"), ("list", "pods")} <= needed
    # only what torchdeck does: the Service beside the job is made, listed and deleted by stop, never read
    assert {("list", "services"), ("delete", "services")} <= needed and ("get", "services") not in needed
    first = asked(render(make_spec(), "cifar10-1"))[0]
    assert (first[0], resource_name(*first[1:])) == ("create", "pytorchjobs.kubeflow.org")  # the job object first


class Refusing:
    """A client whose API server allows everything but one verb on one resource, as RBAC answers."""

    def __init__(self, verb: str, resource: str) -> None:
        self.refused = (verb, resource)
        self.asked: list[dict] = []

    def request(self, method: str, path: str, body: dict | None = None, **_: object) -> dict:
        if path.endswith("selfsubjectreviews"):
            return {"status": {"userInfo": {"username": "system:serviceaccount:training:ci"}}}
        attributes = (body or {})["spec"]["resourceAttributes"]
        self.asked.append(attributes)
        return {"status": {"allowed": (attributes["verb"], attributes["resource"]) != self.refused}}


def test_a_refused_verb_is_named_with_the_resource_the_namespace_and_who_asked() -> None:
    rendered = render(make_spec(), "cifar10-1")
    client = Refusing("create", "pytorchjobs")
    (finding,) = access_findings(client, rendered)  # type: ignore[arg-type]
    assert str(finding).startswith(
        "access (system:serviceaccount:training:ci): may not create pytorchjobs.kubeflow.org in namespace training"
    )
    assert "kubectl auth can-i create pytorchjobs.kubeflow.org -n training" in finding.fix
    assert all(a["namespace"] == "training" for a in client.asked)


def test_against_kmock_the_reviews_do_not_invent_a_refusal(kube_backend) -> None:
    install(kube_backend)
    assert access_findings(kube_backend.client, render(make_spec(), "cifar10-1")) == []


class NoCrds:
    """An API server where this identity may not read CustomResourceDefinitions (a namespace's user)
    and may read discovery, as RBAC's system:discovery role gives everyone."""

    kubeconfig, context = "no-crds", None

    def __init__(self, versions: list[str] | None) -> None:
        self.versions = versions

    def request(self, method: str, path: str, **_: object) -> dict:
        from torchdeck.backends.kubernetes.client import ApiError

        if "customresourcedefinitions" in path:
            raise ApiError('customresourcedefinitions is forbidden: User "team" cannot get', status=403)
        if path == "apis/kueue.x-k8s.io" and self.versions is not None:
            return {"kind": "APIGroup", "name": "kueue.x-k8s.io",
                    "versions": [{"groupVersion": f"kueue.x-k8s.io/{v}", "version": v} for v in self.versions]}  # fmt: skip
        raise ApiError("the server could not find the requested resource", status=404)


def test_a_user_who_may_not_read_crds_finds_kueue_through_discovery() -> None:
    """Issue 55, found on the real cluster: ``queues`` as a namespace's user failed on the CRD's 403."""
    from torchdeck.backends.kubernetes.queues import kueue_version

    assert kueue_version(NoCrds(["v1beta1", "v1beta2"]), fresh=True) == "v1beta2"  # type: ignore[arg-type]
    NoCrds.kubeconfig = "no-kueue"
    assert kueue_version(NoCrds(None), fresh=True) is None  # type: ignore[arg-type]
