"""The cluster's API from the tool: kubectl (the kube program's) through the host's forwarder, and the
objects the tool applies, written as data and sent as JSON (which kubectl and the API server read as
they read YAML)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypeAlias

from kubecluster.layout import Cluster
from kubecluster.processes import NoCluster, run

Object: TypeAlias = dict[str, object]


class Kubectl:
    """kubectl against the cluster, as the host reaches it (127.0.0.1:port, the forwarder)."""

    def __init__(self, cluster: Cluster, kubeconfig: Path | None = None) -> None:
        self.cluster = cluster
        self.kubeconfig = kubeconfig or cluster.kubeconfig

    def command(self, *args: str | Path) -> list[str]:
        return [str(self.cluster.programs.kube), "kubectl", "--kubeconfig", str(self.kubeconfig), *map(str, args)]

    def __call__(self, *args: str | Path, input: str | None = None) -> str:  # noqa: A002
        """ARGS run; their output, or NoCluster with kubectl's own message."""
        done = run(self.command(*args), input=input, check=False)
        if done.returncode != 0:
            raise NoCluster(f"kubectl {' '.join(map(str, args[:3]))}: {last_line(done.stderr)}")
        for line in done.stderr.splitlines():
            # (the Endpoints the outside Services need are v1's; the warning says so at each apply)
            if "v1 Endpoints is deprecated" not in line:
                print(line, file=sys.stderr)
        return done.stdout

    def apply(self, objects: Iterable[Object], *, server_side: bool = False) -> None:
        """OBJECTS applied, as one List."""
        flags = ["--server-side", "--force-conflicts"] if server_side else []
        self("apply", *flags, "-f", "-", input=json.dumps(as_list(objects)))

    def create(self, objects: Iterable[Object]) -> None:
        """OBJECTS made (each must not exist yet: a start makes them in a cluster of its own)."""
        self("create", "-f", "-", input=json.dumps(as_list(objects)))

    def read(self, *args: str | Path) -> list[Object]:
        """What a file or kustomization (`-f FILE` or `-k DIR`) holds, as objects, read by kubectl."""
        return json_stream(self("create", "--dry-run=client", "-o", "json", *args))

    def get(self, kind: str, name: str, namespace: str | None = None) -> Mapping[str, object]:
        where = ["-n", namespace] if namespace else []
        found = json.loads(self("get", kind, name, *where, "-o", "json"))
        return found if isinstance(found, dict) else {}

    def condition(self, kind: str, name: str, condition: str) -> bool:
        """Whether the object's status condition CONDITION is True."""
        status = self.get(kind, name).get("status")
        conditions = status.get("conditions") if isinstance(status, Mapping) else None
        return any(
            isinstance(c, Mapping) and c.get("type") == condition and c.get("status") == "True"
            for c in conditions or ()
        )


def json_stream(text: str) -> list[Object]:
    """The objects in TEXT: kubectl prints one JSON document per object (a List's items flattened)."""
    decoder, found, at = json.JSONDecoder(), list[Object](), 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return found
        value, at = decoder.raw_decode(text, at)
        found += value["items"] if value.get("kind") == "List" else [value]


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "failed"


def as_list(objects: Iterable[Object]) -> Object:
    return {"apiVersion": "v1", "kind": "List", "items": list(objects)}


def namespace(name: str) -> Object:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def cluster_role_binding(name: str, role: str, subject_kind: str, subject: str) -> Object:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": subject_kind, "name": subject}],
    }


def secret(namespace: str, name: str, files: Mapping[str, bytes] | None = None) -> Object:
    import base64

    data = {key: base64.b64encode(value).decode() for key, value in (files or {}).items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "data": data}


def service_account(namespace: str, name: str) -> Object:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}


def config_map(namespace: str, name: str, data: Mapping[str, str]) -> Object:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": dict(data)}  # fmt: skip


def outside_service(namespace: str, name: str, address: str, ports: Iterable[tuple[int, int]]) -> list[Object]:
    """A Service whose endpoint is ADDRESS (the node) rather than pods, one port per (PORT, TARGET): v1
    Endpoints, which the API server's aggregator and webhooks resolve (the controller mirrors them into
    EndpointSlices). How the controllers that run out of the cluster are reached from in it."""
    pairs = list(ports)
    meta = {"name": name, "namespace": namespace}
    service_ports = [{"name": f"p{target}", "port": port, "targetPort": target} for port, target in pairs]
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {"ports": service_ports}},
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": meta,
            "subsets": [
                {
                    "addresses": [{"ip": address}],
                    "ports": [{"name": f"p{target}", "port": target} for _, target in pairs],
                }
            ],  # fmt: skip
        },
    ]


def called(error: subprocess.CalledProcessError) -> str:
    """A failed command's last line of output, for a one-line error."""
    return last_line(error.stderr or error.stdout or "")
