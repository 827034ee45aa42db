"""How the tool runs programs: its own commands (their failure is one line), the cluster's components
(each in the cluster's network namespace, in a session of its own, its output in $state/logs/NAME.log,
its pid and start time in $state/pids/NAME), the forwarders that are the host's only way in, and the
waits for each to come up."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kubecluster.layout import Cluster, Node
from kubecluster.owned import cgroup_hierarchies, owned_pid, remember_pid

Command = Sequence[str | Path]


class NoCluster(Exception):
    """What stops the tool: printed as one line "torchdeck: no cluster: ..." and exit status 3, which
    the tests read as "this machine cannot run a cluster" (they skip unless it is required)."""


def say(message: str) -> None:
    print(f"kube-cluster: {message}", file=sys.stderr, flush=True)


def run(command: Command, *, input: str | None = None, env: Mapping[str, str] | None = None,  # noqa: A002
        cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """COMMAND run to its end, its output captured; a failure (with CHECK) raises CalledProcessError."""
    return subprocess.run(
        [str(part) for part in command],
        input=input,
        capture_output=True,
        text=True,
        env=None if env is None else {**os.environ, **env},
        cwd=cwd,
        check=check,
    )


def succeeds(command: Command) -> bool:
    """Whether COMMAND exits 0 (its output dropped)."""
    done = subprocess.run([str(part) for part in command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return done.returncode == 0


def in_netns(cluster: Cluster, command: Command) -> list[str]:
    """COMMAND inside the cluster's network namespace (and the host's mount namespace)."""
    return ["nsenter", f"--net=/run/netns/{cluster.netns}", *(str(part) for part in command)]


def in_node(cluster: Cluster, node: Node, command: Command) -> list[str]:
    """COMMAND inside NODE's network and mount namespaces (the latter held by its node-mounts process)."""
    holder = owned_pid(cluster.pid_file(node.component("node-mounts")))
    if holder is None:
        raise NoCluster(f"the node {node.name} is not running (its mount namespace is gone)")
    return ["nsenter", f"--net=/run/netns/{node.netns}", f"--mount=/proc/{holder}/ns/mnt",
            *(str(part) for part in command)]  # fmt: skip


def start_component(cluster: Cluster, name: str, command: Command, env: Mapping[str, str] | None = None,
                    node: Node | None = None, wrapped: bool = False) -> None:  # fmt: skip
    """Component NAME started in a session of its own, its output in its log: in the cluster's network
    namespace, or (a NODE's) in that node's namespaces and its system cgroup. WRAPPED: COMMAND already
    says where it runs."""
    if wrapped:
        argv = [str(part) for part in command]
    else:
        argv = in_node(cluster, node, command) if node else in_netns(cluster, command)
    procs = [h / (node.cgroup + "/system") / "cgroup.procs" for h in cgroup_hierarchies()] if node else []

    def join_cgroup() -> None:  # in the child, before it runs COMMAND: everything it starts is the node's
        for file in procs:
            with open(file, "w") as handle:
                handle.write("0")

    with (cluster.logs / f"{name}.log").open("wb") as log:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=None if env is None else {**os.environ, **env},
            preexec_fn=join_cgroup if procs else None,  # noqa: PLW1509 (no threads here)
        )
    remember_pid(cluster.pid_file(name), child.pid)


def running(cluster: Cluster, name: str) -> bool:
    return owned_pid(cluster.pid_file(name)) is not None


def start_forwarder(cluster: Cluster, name: str, host_port: int, address: str, knob: str) -> None:
    """The host's 127.0.0.1:HOST_PORT relayed to ADDRESS in the namespace, as component NAME: the
    socket is opened here, on the host, and handed as descriptor 3 to `kube forward` started inside the
    namespace, so nothing in the namespace needs a route to the host."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", host_port))
    except OSError as error:
        raise NoCluster(f"127.0.0.1:{host_port} is taken ({error.strerror}); set {knob}") from None
    listener.listen(128)

    def as_descriptor_3() -> None:
        if listener.fileno() != 3:
            os.dup2(listener.fileno(), 3)
        os.set_inheritable(3, True)

    with (cluster.logs / f"{name}.log").open("wb") as log, listener:
        child = subprocess.Popen(
            in_netns(cluster, [cluster.programs.kube, "forward", address]),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            preexec_fn=as_descriptor_3,  # noqa: PLW1509 (no threads here)
            close_fds=False,
        )
    remember_pid(cluster.pid_file(name), child.pid)


def wait_for(cluster: Cluster, seconds: float, what: str, ready: Callable[[], bool]) -> None:
    """Until READY says so (an error counts as not yet), or NoCluster after SECONDS."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if ready():
                return
        except (NoCluster, OSError, subprocess.SubprocessError, ValueError, KeyError):
            pass
        if time.monotonic() >= deadline:
            raise NoCluster(f"{what} did not come up in {seconds:g} s (logs: {cluster.logs})")
        time.sleep(0.3)
