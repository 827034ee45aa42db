"""What a drill does to a node, each fault with the command that undoes it:

  crash   every process of the node killed at once (kubelet, containerd, kube-proxy, the pods), as a
          machine that loses its power; `start` boots it again (its kubelet finds its old pods)
  freeze  the node's whole cgroup subtree frozen (a hung kernel, a GPU that stops answering): every
          process is there and none runs; `thaw`
  cut     the node's link to the fabric down (a partition): it runs on, alone; `join`
  slow    the node's subtree held to PERCENT of one CPU (10 to 800), in slices of 10 ms: a slower
          machine (a throttled CPU, a GPU clocked down), not one that stops for a tenth of a
          second at a time; `unslow`

The control plane's node takes none of them: the cluster would have no API server to tell of it."""

from __future__ import annotations

from pathlib import Path

from kubecluster.layout import Cluster, Node
from kubecluster.node import node_ready, start_node
from kubecluster.owned import cgroup_hierarchies
from kubecluster.processes import NoCluster, run, say, wait_for
from kubecluster.stop import kill_cgroup

PERIOD_US = 10_000
"""The CPU quota's period: its share a 10 ms slice (the kernel's least quota is 1 ms: 10% of a CPU)."""
FAULTS = "crash|start|freeze|thaw|cut|join|slow PERCENT|unslow"


def _controller(name: str) -> Path:
    """The hierarchy of the v1 controller NAME (cpu,cpuacct holds cpu)."""
    for hierarchy in cgroup_hierarchies():
        if name in hierarchy.name.split(","):
            return hierarchy
    raise NoCluster(f"this machine has no {name} cgroup hierarchy (cgroup v1)")


def _subtree(node: Node, controller: str) -> Path:
    folder = _controller(controller) / node.cgroup
    if not folder.is_dir():
        raise NoCluster(f"{node.name} has no {controller} cgroup (is the cluster running?)")
    return folder


def crash(cluster: Cluster, node: Node) -> None:
    thaw(cluster, node)
    kill_cgroup(node.cgroup.partition("/")[2])
    say(f"{node.name}: every process killed")


def boot(cluster: Cluster, node: Node) -> None:
    start_node(cluster, node)
    wait_for(cluster, 120, f"the node {node.name}", lambda: node_ready(cluster, node))
    say(f"{node.name}: started and Ready")


def freeze(cluster: Cluster, node: Node) -> None:
    (_subtree(node, "freezer") / "freezer.state").write_text("FROZEN")
    say(f"{node.name}: frozen")


def thaw(cluster: Cluster, node: Node) -> None:
    (_subtree(node, "freezer") / "freezer.state").write_text("THAWED")


def link(cluster: Cluster, node: Node, up: bool) -> None:
    run(["ip", "-n", cluster.control.netns, "link", "set", node.link, "up" if up else "down"])
    say(f"{node.name}: link {'up' if up else 'cut'}")


def slow(cluster: Cluster, node: Node, percent: int | None) -> None:
    """The node's CPU quota: PERCENT of one CPU, or none. Cgroup v1 refuses a quota below one a pod's
    cgroup under it holds (its CPU limit); the refusal is said as such."""
    quota = _subtree(node, "cpu") / "cpu.cfs_quota_us"
    (quota.parent / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    value = -1 if percent is None else PERIOD_US * percent // 100
    try:
        quota.write_text(str(value))
    except OSError as error:
        raise NoCluster(f"the kernel refused {percent}% of a CPU for {node.name} ({error.strerror}): a pod "
                        "there has a CPU limit above it") from None  # fmt: skip
    say(f"{node.name}: {'no CPU quota' if percent is None else f'{percent}% of one CPU'}")


def fault(cluster: Cluster, name: str, what: str, args: list[str]) -> bool:
    """Fault WHAT (with ARGS) on the node NAME; False where WHAT is not one."""
    node = cluster.node(name)
    if node is cluster.control and len(cluster.nodes) > 1:
        raise NoCluster(f"{node.name} runs the control plane; faults are for the other nodes")
    if what == "slow":
        if len(args) != 1 or not args[0].isdigit() or not 10 <= int(args[0]) <= 800:
            return False
        slow(cluster, node, int(args[0]))
        return True
    actions = {
        "crash": lambda: crash(cluster, node),
        "start": lambda: boot(cluster, node),
        "freeze": lambda: freeze(cluster, node),
        "thaw": lambda: thaw(cluster, node),
        "cut": lambda: link(cluster, node, up=False),
        "join": lambda: link(cluster, node, up=True),
        "unslow": lambda: slow(cluster, node, None),
    }
    if what not in actions or args:
        return False
    actions[what]()
    return True
