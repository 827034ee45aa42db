"""The names that become Kubernetes objects, AWS resources, IAM grants and files
under torchdeck's state folder: one check per kind (cluster, namespace, object
and service account, run id, bucket, S3 key prefix, CIDR block), called where
each name enters (the CLI, the forms, the plans) *and* where a file written
earlier is read back (a cluster.yaml edited by hand, a cluster record), so that
no name reaches a path, an ARN or a URL unchecked: ``../../x`` as a cluster name
once wrote a file outside the state folder, and an empty prefix on one command
granted a whole bucket while another refused it."""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Callable

from .errors import SpecError

CLUSTER_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,99}\Z")
LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
DNS_1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
MAX_RUN_ID = 52
"""Kubernetes derives pod names (``<run>-worker-12-abcde``) and a 63-character
label from a job's name: 52 leave room for them."""


def _shown(value: object) -> str:
    return f"{value!r:.60}"


def check_cluster_name(name: object, field_name: str = "name") -> str:
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


def check_namespace(value: object, field_name: str = "namespace") -> str:
    """A Kubernetes namespace (a DNS-1123 label); returns it."""
    if not isinstance(value, str) or not LABEL_RE.match(value):
        raise SpecError(
            field_name,
            f"{_shown(value)} is not a Kubernetes namespace",
            "1-63 lower-case letters, digits and '-', starting and ending with a letter or digit",
        )
    return value


def check_object_name(value: object, field_name: str, what: str = "Kubernetes name") -> str:
    """A Kubernetes object name such as a service account or a claim (a DNS-1123 subdomain); returns it."""
    if not isinstance(value, str) or len(value) > 253 or not SUBDOMAIN_RE.match(value):
        raise SpecError(
            field_name,
            f"{_shown(value)} is not a {what}",
            "lower-case letters, digits, '-' and '.', starting and ending with a letter or digit",
        )
    return value


def check_service_account(value: object, field_name: str = "service account") -> str:
    """A Kubernetes service account name; returns it."""
    return check_object_name(value, field_name, "service account name")


def check_run_id(value: object, field_name: str = "run id") -> str:
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


BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")


def check_bucket_name(name: object, field_name: str = "--bucket") -> str:
    """An S3 bucket name by S3's rules (moto checks few of them, and AWS's error is vague); returns it."""
    problem = None
    if not isinstance(name, str) or not BUCKET_RE.match(name):
        problem = "3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit"
    elif ".." in name or ".-" in name or "-." in name:
        problem = "no '..', '.-' or '-.'"
    elif name.startswith(("xn--", "sthree-")) or name.endswith(("-s3alias", "--ol-s3")):
        problem = "prefixes xn--/sthree- and suffixes -s3alias/--ol-s3 are reserved"
    else:
        try:
            ipaddress.ip_address(name)
            problem = "must not look like an IP address"
        except ValueError:
            pass
    if problem or not isinstance(name, str):
        raise SpecError(
            field_name, f"{_shown(name)} is not a valid bucket name: {problem}", "e.g. torchdeck-models-123456"
        )
    return name


S3_PREFIX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,200}\Z")


def check_s3_prefix(value: object, field_name: str = "--prefix", *, empty_ok: bool = False) -> str:
    """A key prefix in a bucket, as it goes into IAM grants (``bucket/PREFIX*``, ``s3:prefix
    PREFIX*``); returns it ending in '/'. Empty would grant the whole bucket, and IAM reads '*',
    '?' and ``${...}`` in a resource as wildcards and variables, so only letters, digits, '.', '_',
    '-' and '/' pass, with no '..' and no '//'. ``empty_ok``: the bucket's root is meant (a code
    bucket URL, never a grant)."""
    if empty_ok and value in ("", "/"):
        return ""
    if not isinstance(value, str) or not S3_PREFIX_RE.match(value) or "//" in value or ".." in value:
        raise SpecError(
            field_name,
            f"{_shown(value)}: a key prefix is letters, digits, '.', '_', '-' and '/', not empty, with no "
            "leading '/', '..', '*', '?' or '$'",
            "e.g. models/",
        )
    return value if value.endswith("/") else value + "/"


def check_cidr(value: object, field_name: str = "--endpoint-cidr") -> ipaddress.IPv4Network:
    """An IPv4 CIDR block as EKS's public endpoint filter takes it (network bits only); returns it."""
    try:
        net = ipaddress.ip_network(value if isinstance(value, str) else "", strict=True)
    except ValueError as exc:
        raise SpecError(field_name, f"{_shown(value)} is not a CIDR block: {exc}", "e.g. 203.0.113.7/32") from None
    if not isinstance(net, ipaddress.IPv4Network):
        raise SpecError(field_name, f"{net}: EKS's public endpoint filter takes IPv4 blocks", "e.g. 203.0.113.7/32")
    return net


def check_code_path(value: object, field_name: str, what: str = "a path in the code folder") -> str:
    """A file's path inside the user's code folder (a script, a requirements file): relative, no
    '..', and printable (a newline in it once added an instruction to a Dockerfile); returns it."""
    if not isinstance(value, str) or not value.strip() or len(value) > 255:
        raise SpecError(field_name, f"must be {what}, got {_shown(value)}", "e.g. train.py or requirements.txt")
    if not value.isprintable():
        raise SpecError(field_name, f"{_shown(value)} has control characters", "name a file in the code folder")
    if value.startswith(("/", "~")) or ".." in value.replace("\\", "/").split("/"):
        raise SpecError(field_name, f"must be {what} (relative, no '..'), got {_shown(value)}", "e.g. train.py")
    return value


clock: Callable[[], float] = time.time
"""The clock run ids read: a test pins it to submit twice in one second without sleeping for it."""


STAMPED_ID_RE = re.compile(r"^(?P<name>.+)-\d{4}-(?P<time>\d{6}(?:-\d{1,3})?)\Z")
"""An id ``new_run_id`` made: the job's name, then the day (MMDD) and the time (HHMMSS, ``-N``
where one second held several)."""


def new_run_id(name: str, taken: Callable[[str], bool], now: float | None = None) -> str:
    """A run's id: its job's name and the UTC time to the second (``demo-1124-190102``), with
    ``-1``, ``-2``... where ``taken`` says an id is in use (two submits in one second). The one
    scheme for every backend: ``taken`` is the local backend's claim of a run folder, a cluster's
    answer about the job object. Always a valid run id (the name is cut to leave room)."""
    stamp = time.strftime("%m%d-%H%M%S", time.gmtime(clock() if now is None else now))
    for n in range(1000):
        suffix = f"-{stamp}" + (f"-{n}" if n else "")
        run_id = check_run_id(name[: MAX_RUN_ID - len(suffix)].rstrip("-") + suffix)
        if not taken(run_id):
            return run_id
    raise SpecError("run id", f"1,000 runs of {name!r} in one second", "wait a second and submit again")
