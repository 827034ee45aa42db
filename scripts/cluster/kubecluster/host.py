"""What the cluster changes on the host, each change recorded as it is made so that a stop puts back
or removes exactly that: the global sysctls the kubelet sets, the mounts there before start, the
fixed paths it makes (recorded before any component could make them), its own cgroup root, the
network namespace."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from kubecluster.layout import CGROUP_ROOT, FIXED_PATHS, SERVICE_CIDR, SYSCTLS, Cluster
from kubecluster.owned import mount_table
from kubecluster.processes import NoCluster, in_netns, run


def _record(cluster: Cluster, line: str) -> None:
    with cluster.before.open("a") as file:
        file.write(line + "\n")


def records(cluster: Cluster) -> list[tuple[str, str, str]]:
    """(kind, name, value) for each line of the record: ("sysctl", NAME, VALUE) and ("made", PATH, "")."""
    if not cluster.before.is_file():
        return []
    found = []
    for line in cluster.before.read_text().splitlines():
        kind, _, rest = line.partition(" ")
        name, _, value = rest.partition(" ") if kind == "sysctl" else (rest, "", "")
        found.append((kind, name, value))
    return found


def made(cluster: Cluster, path: Path) -> bool:
    """PATH, or a folder it is in, was made by this start."""
    ours = {Path(name) for kind, name, _ in records(cluster) if kind == "made"}
    return any(p in ours for p in (path, *path.parents) if p != Path("/"))


def make_fixed(cluster: Cluster, path: Path) -> None:
    """A folder at a fixed path and the parents it lacks, each recorded as made here (no exist_ok: where
    someone makes it first, it is theirs and the mkdir fails)."""
    absent: list[Path] = []
    while not path.exists() and not path.is_symlink():
        absent.insert(0, path)
        path = path.parent
    for folder in absent:
        try:
            folder.mkdir()
        except OSError as error:
            raise NoCluster(f"could not make {folder} ({error.strerror})") from None
        _record(cluster, f"made {folder}")


def place_fixed(cluster: Cluster, folder: Path, *files: Path) -> None:
    """FILES copied into a fixed folder, never over one the cluster did not make."""
    make_fixed(cluster, folder)
    for file in files:
        target = folder / file.name
        if (target.exists() or target.is_symlink()) and not made(cluster, target):
            raise NoCluster(f"{target} is there and not the cluster's (it would be overwritten)")
        shutil.copyfile(file, target)
        if not made(cluster, target):
            _record(cluster, f"made {target}")


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (each v1 controller's, and the unified one)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2"):
            found.append(Path(fields[1]))
    return found


def make_cgroup_root() -> None:
    """The kubelet checks that its cgroupRoot exists in every hierarchy."""
    for hierarchy in cgroup_hierarchies():
        root = hierarchy / CGROUP_ROOT
        root.mkdir(parents=True, exist_ok=True)
        # (a new cpuset cgroup starts with no CPUs and no memory nodes)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).is_file():
                (root / name).write_text((hierarchy / name).read_text())


def sysctl(name: str) -> str:
    return Path("/proc/sys", name.replace(".", "/")).read_text().strip()


def remember_host(cluster: Cluster) -> None:
    """What a stop must put back (the sysctls the kubelet sets) and what it may take away: the mounts
    not in the table now, the fixed paths made here, the cluster's cgroup root."""
    cluster.mounts_before.write_text("".join(entry + "\n" for entry in mount_table()))
    cluster.before.write_text("".join(f"sysctl {name} {sysctl(name)}\n" for name in SYSCTLS))
    for path in FIXED_PATHS:
        make_fixed(cluster, Path(path))
    make_cgroup_root()


def make_namespace(cluster: Cluster) -> None:
    """The network namespace every component and pod lives in: a bridge with each node's address and no
    route out but the service range's, which the node itself reaches Services by (kube-proxy's DNAT in
    OUTPUT), as a controller in a pod would."""
    ns = cluster.netns
    run(["ip", "netns", "add", ns])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    run(["ip", "-n", ns, "link", "add", "cni0", "type", "bridge"])
    for node in cluster.nodes:
        run(["ip", "-n", ns, "addr", "add", f"{node.ip}/24", "dev", "cni0"])
    run(["ip", "-n", ns, "link", "set", "cni0", "up"])
    run(["ip", "-n", ns, "route", "add", SERVICE_CIDR, "dev", "cni0", "src", cluster.control.ip])
    forwarding = in_netns(cluster, ["sysctl", "-qw", "net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"])
    if subprocess.run(forwarding, capture_output=True).returncode != 0:
        run(in_netns(cluster, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]))
