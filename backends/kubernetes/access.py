"""What the identity in the kubeconfig may do, asked before a job is made: one SelfSubjectAccessReview
per verb torchdeck uses on each resource of the job (create what it applies; get, list and delete the
job, and list and delete the Services it made beside it, for status and stop; read the pods, their
logs and the events, for the monitor).
The review is the API server's own authoritative answer (RBAC, and EKS's access-entry webhook alike),
unlike a rules review, which a webhook authoriser leaves incomplete."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .client import KINDS, ApiError, ApiKind
from .diagnosis import Finding
from .jobs import api_of
from .objects import AccessReview, SubjectReview

if TYPE_CHECKING:
    from .client import KubeClient
    from .manifests import Rendered

REVIEWS = "apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
WHO = "apis/authentication.k8s.io/v1/selfsubjectreviews"
JOB_VERBS = ("create", "get", "list", "delete")
"""On the job object: apply it, find it (status, run-id checks), and stop it."""
BESIDE_VERBS = {"Service": ("create", "list", "delete"), "Deployment": ("create", "list", "delete"),
                "NetworkPolicy": ("create", "list", "delete")}  # fmt: skip
"""On what torchdeck makes beside the job: apply it, and (``stop``) find and delete it by the run's
label; anything else (the code bundle's ConfigMap, immutable and named by its digest) is only made."""
READ = (("get", "pods", ""), ("list", "pods", ""), ("get", "pods", "log"), ("list", "events", ""))
"""What the monitor and ``logs`` read in the job's namespace."""


def group_of(api: ApiKind) -> str:
    """The API group of a kind's base path ("" for the core group)."""
    return "" if api.base == "api/v1" else api.base.split("/")[1]


def resource_name(group: str, resource: str, subresource: str) -> str:
    """As kubectl names it: pods, pods/log, pytorchjobs.kubeflow.org."""
    name = f"{resource}.{group}" if group else resource
    return f"{name}/{subresource}" if subresource else name


def asked(rendered: Rendered) -> list[tuple[str, str, str, str]]:
    """(verb, group, resource, subresource) for every access the job needs, in the order a user
    meets them (the job object first), without repeats."""
    needed: list[tuple[str, str, str, str]] = []
    kinds = [rendered.main["kind"]] + [o["kind"] for o in rendered.objects[:-1]]
    for i, kind in enumerate(kinds):
        api = api_of(kind)
        api = KINDS[api] if isinstance(api, str) else api
        verbs = JOB_VERBS if i == 0 else BESIDE_VERBS.get(kind, ("create",))
        needed += [(verb, group_of(api), api.plural, "") for verb in verbs]
    needed += [(verb, "", resource, sub) for verb, resource, sub in READ]
    return list(dict.fromkeys(needed))


def identity(client: KubeClient) -> str:
    """Who the API server says the kubeconfig is ("" where it does not say)."""
    try:
        review = client.request(
            "POST", WHO, body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
    except ApiError:
        return ""
    return SubjectReview.from_api(review).username


def access_findings(client: KubeClient, rendered: Rendered) -> list[Finding]:
    """One finding per access the job needs and the API server refuses, each naming the verb, the
    resource and the namespace; none where everything is allowed (or the reviews cannot be asked:
    the requests themselves then say what is wrong)."""
    ns = rendered.namespace
    denied: list[tuple[str, str]] = []
    for verb, group, resource, sub in asked(rendered):
        attributes = {"namespace": ns, "verb": verb, "group": group, "resource": resource}
        if sub:
            attributes["subresource"] = sub
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        try:
            review = client.request("POST", REVIEWS, body=body)
        except ApiError:
            return []
        if not AccessReview.from_api(review).allowed:
            denied.append((verb, resource_name(group, resource, sub)))
    if not denied:
        return []
    who = identity(client)
    subject = f" ({who})" if who else ""
    return [
        Finding(
            f"access{subject}",
            f"may not {verb} {name} in namespace {ns}",
            f"ask your cluster's admin for a Role in {ns} that allows it (kubectl auth can-i {verb} {name} -n {ns})",
        )
        for verb, name in denied
    ]
