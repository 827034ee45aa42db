"""What torchdeck keeps about an EKS cluster on this machine, and how it
reaches one: the local record of every AWS resource created for it (so a
re-run reuses them and delete finds them), IAM names, the kubeconfig context
with exec authentication, and the EKS token that exec prints.

No credential is written anywhere: the kubeconfig runs a command that signs a
short-lived token from whatever credentials the environment holds then."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .session import AwsSession, redact, translate
from ..errors import BackendError
from .plan import CLUSTER_TAG
from ..ledger import Ledger

TOKEN_PREFIX = "k8s-aws-v1."
EXEC_API = "client.authentication.k8s.io/v1beta1"


def role_name(cluster: str, purpose: str) -> str:
    """IAM role names allow 64 characters; long cluster names keep a hash to stay unique."""
    name = f"torchdeck-{cluster}-{purpose}"
    if len(name) <= 64:
        return name
    digest = hashlib.sha1(cluster.encode()).hexdigest()[:8]
    return f"td-{cluster[:63 - len(purpose) - 13]}-{digest}-{purpose}"


def context_name(cluster: str) -> str:
    return f"torchdeck-{cluster}"


@dataclass
class ClusterRecord:
    """``$STATE/clusters/NAME.json``: what torchdeck made for one cluster, step by step."""

    name: str
    region: str
    method: str = ""
    """eksctl or native: the path create took."""
    plan_file: str = ""
    state: str = "planned"
    """planned, creating, created, deleting, deleted."""
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    """key (e.g. "iam-role/torchdeck-demo-node") -> {"type", "id", "created": this run made it, "at"}."""
    kubeconfig: str = ""
    context: str = ""
    account: str = ""
    """The AWS account the cluster lives in (for the ledger)."""
    storage: dict[str, Any] = field(default_factory=dict)
    """The last storage create: kind, pvc, namespace, bucket, prefix, service_account."""
    updated_at: float = 0.0
    path: Path | None = field(default=None, repr=False, compare=False)

    @classmethod
    def file_for(cls, state_dir: Path, name: str) -> Path:
        return Path(state_dir) / "clusters" / f"{name}.json"

    @classmethod
    def load(cls, state_dir: Path, name: str) -> "ClusterRecord | None":
        path = cls.file_for(state_dir, name)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise BackendError(f"{path}: unreadable cluster record: {exc}", "move it aside and run again") from None
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "path"}
        return cls(**known, path=path)

    @classmethod
    def all(cls, state_dir: Path) -> list["ClusterRecord"]:
        """Every cluster torchdeck keeps a record of and has not deleted, by name; an unreadable
        record is skipped (``load`` on it says why)."""
        found = []
        for path in sorted((Path(state_dir) / "clusters").glob("*.json")):
            try:
                record = cls.load(state_dir, path.stem)
            except BackendError:
                continue
            if record and record.state != "deleted":
                found.append(record)
        return found

    @classmethod
    def open(cls, state_dir: Path, name: str, region: str) -> "ClusterRecord":
        record = cls.load(state_dir, name) or cls(name, region)
        record.path = cls.file_for(state_dir, name)
        return record

    @property
    def ledger(self) -> Ledger:
        assert self.path is not None
        return Ledger(self.path.parent.parent)

    def note(self, kind: str, ident: str, created: bool, hourly: float = 0.0, made: bool | None = None,
             **extra: Any) -> None:
        """Remember a resource (made now, or found and reused) and save at once: a crash loses nothing.
        It goes into the ledger too, with ``hourly`` its estimated cost; ``made`` (default: ``created``)
        says whether torchdeck made it, and so whether cleanup deletes it."""
        key = f"{kind}/{ident}"
        before = self.resources.get(key, {})
        self.resources[key] = {**before, "type": kind, "id": ident, "created": before.get("created", False) or created,
                               "at": before.get("at", time.time()), **extra}
        self.save()
        self.ledger.add(kind, ident, region=self.region, account=self.account, scope=self.name,
                        tags={CLUSTER_TAG: self.name}, detail=extra, made=created if made is None else made,
                        cost_per_hour=hourly)

    def forget(self, kind: str, ident: str) -> None:
        """It is deleted (or was gone already)."""
        self.resources.pop(f"{kind}/{ident}", None)
        self.save()
        self.ledger.gone(kind, ident, self.region)

    def of_type(self, kind: str) -> list[str]:
        return [r["id"] for r in self.resources.values() if r["type"] == kind]

    def save(self) -> None:
        assert self.path is not None
        self.updated_at = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in asdict(self).items() if k != "path"}
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(redact(json.dumps(data, indent=2, sort_keys=True)))
        tmp.replace(self.path)


# -- the kubeconfig -------------------------------------------------------------------


def default_kubeconfig() -> Path:
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    return Path(first).expanduser() if first else Path.home() / ".kube" / "config"


def exec_user(cluster: str, region: str, profile: str | None, use_aws_cli: bool) -> dict[str, Any]:
    """The kubeconfig user: a command that prints an EKS token when kubectl needs one."""
    if use_aws_cli:
        command, args = "aws", ["eks", "get-token", "--cluster-name", cluster, "--region", region, "--output", "json"]
    else:
        command, args = sys.executable, ["-m", "torchdeck", "cluster", "token", "--name", cluster, "--region", region]
    user: dict[str, Any] = {"exec": {"apiVersion": EXEC_API, "command": command, "args": args,
                                     "interactiveMode": "Never", "provideClusterInfo": False}}
    if profile:
        user["exec"]["env"] = [{"name": "AWS_PROFILE", "value": profile}]
    return user


def _replace(entries: list[dict[str, Any]], name: str, body: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    kept = [e for e in entries or [] if e.get("name") != name]
    return kept + ([{"name": name, key: body}] if body is not None else [])


def write_context(path: Path, cluster: str, region: str, endpoint: str, ca_data: str, profile: str | None = None,
                  use_aws_cli: bool = False) -> str:
    """Add (or refresh) the cluster's context in the kubeconfig, make it current; mode 0600. Returns the context."""
    context = context_name(cluster)
    config = _read_kubeconfig(path)
    config["clusters"] = _replace(config.get("clusters"), context, {"server": endpoint,
                                                                   "certificate-authority-data": ca_data}, "cluster")
    config["users"] = _replace(config.get("users"), context, exec_user(cluster, region, profile, use_aws_cli), "user")
    config["contexts"] = _replace(config.get("contexts"), context, {"cluster": context, "user": context}, "context")
    config["current-context"] = context
    _write_kubeconfig(path, config)
    return context


def remove_context(path: Path, cluster: str) -> bool:
    """Take the cluster's entries out of the kubeconfig (after delete); True if there were any."""
    if not path.exists():
        return False
    context = context_name(cluster)
    config = _read_kubeconfig(path)
    found = any(c.get("name") == context for c in config.get("contexts") or [])
    for key, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
        config[key] = _replace(config.get(key), context, None, inner)
    if config.get("current-context") == context:
        config["current-context"] = ""
    _write_kubeconfig(path, config)
    return found


def _read_kubeconfig(path: Path) -> dict[str, Any]:
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        config = {}
    except (OSError, yaml.YAMLError) as exc:
        raise BackendError(f"{path}: not a readable kubeconfig: {exc}", "fix or move it, then connect again") from None
    if not isinstance(config, dict):
        raise BackendError(f"{path}: not a kubeconfig (expected a mapping)", "fix or move it, then connect again")
    config.setdefault("apiVersion", "v1")
    config.setdefault("kind", "Config")
    return config


def _write_kubeconfig(path: Path, config: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".torchdeck.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    os.chmod(tmp, 0o600)
    tmp.replace(path)


def connect(aws: AwsSession, cluster: str, kubeconfig: Path | None = None, use_aws_cli: bool = False) -> tuple[Path, str]:
    """Write the cluster's context (exec authentication) into the kubeconfig; returns (file, context)."""
    path = kubeconfig or default_kubeconfig()
    info = aws.call("eks", "describe_cluster", name=cluster)["cluster"]
    if info.get("status") != "ACTIVE" or not info.get("endpoint"):
        raise BackendError(f"cluster {cluster} is {info.get('status')}: no endpoint to connect to yet",
                           "wait for it (torchdeck cluster status) and connect again")
    context = write_context(path, cluster, aws.region or "", info["endpoint"],
                            (info.get("certificateAuthority") or {}).get("data", ""), aws.profile, use_aws_cli)
    return path, context


def eks_token(aws: AwsSession, cluster: str) -> dict[str, Any]:
    """An ExecCredential holding an EKS bearer token: a presigned STS GetCallerIdentity URL for the cluster,
    valid 15 minutes (what ``aws eks get-token`` prints)."""
    sts = aws.client("sts")

    def add_cluster_header(request, **_: Any) -> None:
        request.headers["x-k8s-aws-id"] = cluster

    sts.meta.events.register_first("before-sign.sts.GetCallerIdentity", add_cluster_header,
                                   unique_id="torchdeck-k8s-aws-id")
    try:
        url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET")
    except Exception as exc:
        raise translate(exc, "sts presign") from None
    token = TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    expires = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=14)
    return {"kind": "ExecCredential", "apiVersion": EXEC_API, "spec": {},
            "status": {"expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"), "token": token}}
