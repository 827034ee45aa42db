"""The tool's commands, as scripts/kube-cluster.sh is called:

  start       build what is missing, start the cluster, print KUBECONFIG=... (idempotent)
  stop        stop it and remove everything it made outside the cache (idempotent)
  status      one line per component; exit 0 when all run
  kubeconfig  print the path of the host's kubeconfig (the API server on 127.0.0.1:$TORCHDECK_KUBE_PORT)
  load IMAGE...  Docker images into the node's containerd through the cluster's registry (by layer:
              what the registry and the node hold already does not move again)
  kubectl ARGS  kubectl against the cluster, from the host
  ctr [--node NAME] ARGS  a node's containerd (namespace k8s.io; the first node's by default), e.g.
              `ctr images ls`
  build       only build (or find) the programs
  nodes       the nodes: name, address, zone (TORCHDECK_KUBE_NODES=N at start: N nodes, the control
              plane's taking no pods when N > 1)
  node NAME crash|start|freeze|thaw|cut|join|slow PERCENT|unslow  a fault on a node, and its undoing
              (kubecluster/faults.py says what each does)
  kwok start [PODS_LOGS]|stop  KWOK's simulated nodes (those labelled type=kwok) on the API server
              (built on demand); PODS_LOGS: lines "NAMESPACE POD FILE", each pod's log that file
  kueue-integrations default|torchdeck  run Kueue again with its own default integrations (no
              kubeflow.org/pytorchjob from v0.19), or with those torchdeck submits (as start does)

Anything missing prints one line starting "torchdeck: no cluster:" and exits 3; a wrong command, a
usage line and exit 2."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from kubecluster.build import GO_ENV, build
from kubecluster.components import kueue_integrations, start_addons, start_controllers
from kubecluster.control_plane import make_pki, start_control_plane
from kubecluster.faults import FAULTS, fault
from kubecluster.host import make_namespace, remember_host
from kubecluster.layout import NODES_FILE, Cluster, cluster_from_environment, default_nodes, wanted_node_count
from kubecluster.node import ctr, start_nodes
from kubecluster.owned import private_dir
from kubecluster.processes import NoCluster, running, say
from kubecluster.registry import load, start_registry
from kubecluster.stop import stop

USAGE = (
    "start|stop|status|kubeconfig|load IMAGE...|kubectl ARGS|ctr [--node NAME] ARGS|build|nodes|"
    f"node NAME {FAULTS}|kwok start [PODS_LOGS]|stop|kueue-integrations default|torchdeck"
)


def status(cluster: Cluster) -> int:
    if not cluster.pids.is_dir():
        print("stopped")
        return 1
    down = 0
    for name in cluster.component_names():
        up = running(cluster, name)
        print(f"{name} {'running' if up else 'down'}")
        down |= not up
    return down


def start(cluster: Cluster) -> int:
    if platform.system() != "Linux":
        raise NoCluster("not Linux")
    if os.geteuid() != 0:
        raise NoCluster("not root (the kubelet and containerd need it)")
    wanted = len(default_nodes(cluster.state, cluster.cache, wanted_node_count()))
    if _quietly(status, cluster) == 0 and wanted == len(cluster.nodes):
        print(f"KUBECONFIG={cluster.kubeconfig}")
        return 0
    stop(cluster)
    cluster = replace(cluster, nodes=default_nodes(cluster.state, cluster.cache, wanted))
    build(cluster)
    started = time.monotonic()
    private_dir(cluster.state, cluster.logs, cluster.pids)
    (cluster.state / NODES_FILE).write_text(f"{wanted}\n")
    remember_host(cluster)
    make_namespace(cluster)
    make_pki(cluster)
    start_control_plane(cluster)
    start_nodes(cluster)
    start_registry(cluster)
    start_addons(cluster)
    start_controllers(cluster)
    shutil.copytree(cluster.logs, cluster.cache / "last-logs", dirs_exist_ok=True)
    v = cluster.versions
    say(f"up in {round(time.monotonic() - started)} s, {len(cluster.nodes)} node(s): Kubernetes {v.kubernetes}, containerd {v.containerd}, "
        f"Training Operator {v.training_operator}, JobSet {v.jobset}, Trainer {v.trainer}, "
        f"MPI Operator {v.mpi_operator}, Kueue {v.kueue}")  # fmt: skip
    print(f"KUBECONFIG={cluster.kubeconfig}")
    return 0


def _quietly(command: Callable[[Cluster], int], cluster: Cluster) -> int:
    stdout = sys.stdout
    with open(os.devnull, "w") as sys.stdout:
        try:
            return command(cluster)
        finally:
            sys.stdout = stdout


def _exec(command: list[str]) -> int:
    sys.stdout.flush()
    os.execvp(command[0], command)
    return 127  # (never: exec replaces this process)


def _usage(line: str) -> int:
    print(f"usage: {sys.argv[0] if sys.argv[0].endswith('.sh') else 'kube-cluster.sh'} {line}", file=sys.stderr)
    return 2


def dispatch(cluster: Cluster, command: str, args: list[str]) -> int:
    if command == "start":
        return start(cluster)
    if command == "stop":
        stop(cluster)
        return 0
    if command == "status":
        return status(cluster)
    if command == "build":
        build(cluster)
        return 0
    if command == "kubeconfig":
        if not cluster.kubeconfig.is_file():
            raise NoCluster("not started")
        print(cluster.kubeconfig)
        return 0
    if command == "kwok":
        from kubecluster.kwok import start_kwok
        from kubecluster.stop import end

        if args[:1] == ["start"] and len(args) <= 2:
            start_kwok(cluster, Path(args[1]) if len(args) == 2 else None)
            return 0
        if args == ["stop"]:
            end(cluster, "kwok")
            return 0
        return _usage("kwok start [PODS_LOGS]|stop")
    if command == "load":
        if not args:
            return _usage("load IMAGE...")
        load(cluster, args)
        return 0
    if command == "ctr":
        node = cluster.control
        if args[:1] == ["--node"] and len(args) > 1:
            node, args = cluster.node(args[1]), args[2:]
        return _exec([*ctr(cluster, node), *args])
    if command == "nodes":
        for node in cluster.nodes:
            print(node.name, node.ip, node.zone, "control-plane" if node is cluster.control else "worker")
        return 0
    if command == "node":
        if len(args) < 2 or not fault(cluster, args[0], args[1], args[2:]):
            return _usage(f"node NAME {FAULTS}")
        return 0
    if command == "kubectl":
        if not cluster.kubeconfig.is_file():
            raise NoCluster("not started")
        return _exec([str(cluster.programs.kube), "kubectl", "--kubeconfig", str(cluster.kubeconfig), *args])
    if command == "kueue-integrations":
        if args not in (["default"], ["torchdeck"]):
            return _usage("kueue-integrations default|torchdeck")
        kueue_integrations(cluster, args[0])
        return 0
    return _usage(USAGE)


def main(argv: list[str]) -> int:
    os.environ.update(GO_ENV)
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        cluster = cluster_from_environment()
    except ValueError as error:
        hint = (
            ""
            if "TORCHDECK_KUBE_NODES" in str(error)
            else "; TORCHDECK_KUBE_PORT and TORCHDECK_REGISTRY_PORT are port numbers"
        )
        print(f"torchdeck: no cluster: {error}{hint}", file=sys.stderr)
        return 3
    try:
        return dispatch(cluster, command, args)
    except (NoCluster, ValueError) as error:
        print(f"torchdeck: no cluster: {error}", file=sys.stderr)
        return 3
    except subprocess.CalledProcessError as error:
        what = " ".join(map(str, error.cmd[:4])) if isinstance(error.cmd, list) else str(error.cmd)
        detail = (error.stderr or error.stdout or "").strip().splitlines()
        print(f"torchdeck: no cluster: {what} failed: {detail[-1] if detail else error.returncode} "
              f"(logs: {cluster.logs})", file=sys.stderr)  # fmt: skip
        return 3
    except KeyboardInterrupt:
        return 130
