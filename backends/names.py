"""The names that become Kubernetes objects, AWS resources and files under
torchdeck's state folder. One set of checks, called where each name enters (the
CLI, the forms, the plans, the cluster records), so that no name reaches a path,
an ARN or a URL unchecked: ``../../x`` as a cluster name once wrote a file
outside the state folder and made an ECR repository the ledger could not see."""

from __future__ import annotations

import re
from typing import Any

from .errors import SpecError

CLUSTER_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,99}\Z")
LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
DNS_1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
MAX_RUN_ID = 52
"""Kubernetes derives pod names (``<run>-worker-12-abcde``) and a 63-character
label from a job's name: 52 leave room for them."""


def _shown(value: Any) -> str:
    return f"{value!r:.60}"


def check_cluster_name(name: Any, field_name: str = "name") -> str:
    """An EKS cluster name as eksctl's CloudFormation stacks take it; returns it."""
    if not isinstance(name, str) or not name:
        raise SpecError(field_name, "must not be empty", "e.g. torchdeck-demo")
    if not name.isascii():
        raise SpecError(field_name, f"{_shown(name)} has non-ASCII characters", "use letters, digits and '-'")
    if len(name) > 100:
        raise SpecError(field_name, f"is {len(name)} characters; EKS allows 100", "shorten it")
    if not name[0].isalpha():
        fixed = "t" + name
        hint = f"e.g. {fixed}" if CLUSTER_NAME_RE.match(fixed) else "letters, digits and '-', starting with a letter"
        raise SpecError(field_name, f"{_shown(name)} must start with a letter (CloudFormation stack names do)", hint)
    if "_" in name:
        raise SpecError(
            field_name,
            f"{_shown(name)} has '_': eksctl's CloudFormation stack names allow letters, digits and '-' only",
            "use '-' instead",
        )
    if not CLUSTER_NAME_RE.match(name):
        bad = " ".join(repr(c)[1:-1] for c in sorted({c for c in name if not (c.isalnum() or c == "-")}))
        raise SpecError(field_name, f"{_shown(name)} has characters EKS refuses: {bad}", "use letters, digits and '-'")
    return name


def check_namespace(value: Any, field_name: str = "namespace") -> str:
    """A Kubernetes namespace (a DNS-1123 label); returns it."""
    if not isinstance(value, str) or not LABEL_RE.match(value):
        raise SpecError(
            field_name,
            f"{_shown(value)} is not a Kubernetes namespace",
            "1-63 lower-case letters, digits and '-', starting and ending with a letter or digit",
        )
    return value


def check_object_name(value: Any, field_name: str, what: str = "Kubernetes name") -> str:
    """A Kubernetes object name such as a service account or a claim (a DNS-1123 subdomain); returns it."""
    if not isinstance(value, str) or len(value) > 253 or not SUBDOMAIN_RE.match(value):
        raise SpecError(
            field_name,
            f"{_shown(value)} is not a {what}",
            "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit",
        )
    return value


def check_service_account(value: Any, field_name: str = "service account") -> str:
    """A Kubernetes service account name; returns it."""
    return check_object_name(value, field_name, "service account name")


def check_run_id(value: Any, field_name: str = "run id") -> str:
    """The name a run's objects take (a DNS-1035 label short enough for its pod names); returns it."""
    if not isinstance(value, str) or not DNS_1035_RE.match(value):
        raise SpecError(
            field_name,
            f"{_shown(value)} is not a DNS-1035 name",
            "lower-case letters, digits and '-', starting with a letter, ending with a letter or digit",
        )
    if len(value) > MAX_RUN_ID:
        raise SpecError(
            field_name,
            f"{_shown(value)} is {len(value)} characters; at most {MAX_RUN_ID} fit in "
            "the pod names Kubernetes derives from it",
            "use a shorter name",
        )
    return value
