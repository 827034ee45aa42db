"""KWOK (sigs.k8s.io/kwok, from its Go module at the release versions.toml declares) beside the real
cluster: simulated nodes, and the pods the real scheduler binds to them, on the real API server, for
measuring torchdeck at the size users run. Its stages are KWOK's own (the module's kustomize/stage:
node initialize, node heartbeat with a lease, pod ready/complete/delete); a pod's log is a file in
the kubelet's CRI format (KWOK's Logs objects in its configuration), served through KWOK's kubelet API, which the API server
reaches on the cluster's address: ``kubectl logs`` and torchdeck read a simulated pod's lines as a
real one's. Built on demand (``kube-cluster.sh kwok start``), not with every start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kubecluster.build import GO_ENV, GoProgram, _go_build, module_dir
from kubecluster.formats import Data, write_file, yaml_text
from kubecluster.host import _record, records, sysctl
from kubecluster.layout import Cluster
from kubecluster.processes import NoCluster, run, say, start_component, wait_for
from kubecluster.stop import end

LABEL = ("type", "kwok")
"""The label of the nodes KWOK manages (those it simulates); the real nodes are not."""
PORT = 10247
"""KWOK's kubelet API on the cluster's address (the simulated nodes' kubelet endpoint)."""
STAGES = ("node/fast", "node/heartbeat-with-lease", "pod/fast")
"""KWOK's own stage sets (kustomize/stage/...): what a simulated node and pod go through."""


def kwok_program(cluster: Cluster) -> GoProgram:
    version = cluster.versions.kwok
    return GoProgram(cluster.programs.folder("kwok", version), "sigs.k8s.io/kwok", version, ("./cmd/kwok",))


def stage_documents(version: str) -> list[str]:
    """KWOK's stage manifests, as its module holds them (each a YAML document, unchanged)."""
    source = module_dir("sigs.k8s.io/kwok", version) / "kustomize" / "stage"
    documents = []
    for stage in STAGES:
        for file in sorted((source / stage).glob("*.yaml")):
            if file.name != "kustomization.yaml":
                documents.append(file.read_text())
    return documents


def configuration(cluster: Cluster, logs: Mapping[tuple[str, str], Path]) -> str:
    """KWOK's configuration: its options (the nodes it manages, its kubelet API on the cluster's
    address with the API server's certificate), its stages, and a Logs object a pod of ``logs``
    ((namespace, pod) -> file)."""
    options: Data = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "manageNodesWithLabelSelector": "=".join(LABEL),
            "nodeIP": cluster.control.ip,
            "nodePort": PORT,
            "serverAddress": f"{cluster.control.ip}:{PORT}",
            "tlsCertFile": str(cluster.pki / "apiserver.crt"),
            "tlsPrivateKeyFile": str(cluster.pki / "apiserver.key"),
            "nodeLeaseDurationSeconds": 40,
            # what KWOK's own defaults say, given (a configuration file's options are not defaulted)
            "nodeLeaseParallelism": 4,
            "nodePlayStageParallelism": 4,
            "podPlayStageParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
            "enableDebuggingHandlers": True,  # the kubelet API's logs
            "cidr": "10.200.0.0/16",  # the simulated pods' addresses: room for thousands, apart from the cluster's
        },
    }
    pod_logs: list[Data] = [
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {"logs": [{"logsFile": str(file), "follow": True}]},  # every container of the pod
        }
        for (namespace, pod), file in sorted(logs.items())
    ]
    return "---\n".join(
        [yaml_text(options), *stage_documents(cluster.versions.kwok), yaml_text(*pod_logs) if pod_logs else ""]
    )


def start_kwok(cluster: Cluster, logs_file: Path | None = None) -> None:
    """KWOK built (once) and started in the cluster's network namespace with the super-admin
    kubeconfig; ``logs_file``: lines ``NAMESPACE POD FILE``, the pods whose log is that file."""
    if not cluster.kubeconfig.is_file():
        raise NoCluster("not started: kube-cluster.sh start first")
    program = kwok_program(cluster)
    env = {**os.environ, **GO_ENV, "GOCACHE": str(cluster.cache / "go-build-kwok")}
    _go_build(program, env)
    logs: dict[tuple[str, str], Path] = {}
    if logs_file is not None:
        for line in logs_file.read_text().splitlines():
            namespace, pod, file = line.split()
            logs[(namespace, pod)] = Path(file)
    _enough_inotify(cluster, 4 * len(logs))
    config = write_file(cluster.conf / "kwok.yaml", configuration(cluster, logs))
    end(cluster, "kwok")
    start_component(cluster, "kwok", [program.folder / "kwok", f"--kubeconfig={cluster.admin_kubeconfig}",
                                      f"--config={config}"])  # fmt: skip
    wait_for(cluster, 60, "KWOK", lambda: (cluster.logs / "kwok.log").is_file())
    say(
        f"KWOK {cluster.versions.kwok} manages the nodes labelled {'='.join(LABEL)} ({len(logs)} pods' logs from files)"
    )


INOTIFY = "fs.inotify.max_user_instances"


def _enough_inotify(cluster: Cluster, wanted: int) -> None:
    """Room for a followed log a pod: KWOK follows each file with an inotify instance of its own (the
    kubelet's log reader), all in one process, where a real cluster's are spread over its kubelets;
    at the host's 128 the 129th stream ends as soon as it starts. Raised for the cluster's life, put
    back by its stop (the record of what it changed)."""
    now = int(sysctl(INOTIFY))
    if wanted <= now:
        return
    if not any(kind == "sysctl" and name == INOTIFY for kind, name, _ in records(cluster)):
        _record(cluster, f"sysctl {INOTIFY} {now}")
    run(["sysctl", "-qw", f"{INOTIFY}={wanted}"])
