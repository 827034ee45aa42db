"""How the cluster, run as root, tells what it made from what was there already or is someone else's,
so that a stop acts only on its own (the same records as scripts/cluster/owned.sh, which
scripts/docker-engine.sh sources).

A process is named by its pid *and* its start time (field 22 of /proc/PID/stat, clock ticks after
boot): a pid file outlives a crash or a reboot, and its pid may by then be another process's. A mount
is named by its mount id and mount point, compared with the table as it was before start."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Sequence
from pathlib import Path


def started_at(pid: int) -> str | None:
    """The process's start time; None where no such process runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the fields after the command name, which may itself hold spaces and parentheses; field 3 first
    fields = stat.rpartition(") ")[2].split()
    return fields[19] if len(fields) > 19 else None


def remember_pid(file: Path, pid: int) -> None:
    """What names the process the caller just started."""
    file.write_text(f"{pid} {started_at(pid) or 'gone'}\n")


def owned_pid(file: Path) -> int | None:
    """The pid FILE names, where that pid is still the process that was started."""
    try:
        pid_text, _, start = file.read_text().strip().partition(" ")
    except OSError:
        return None
    if not pid_text.isdigit() or int(pid_text) < 1 or not start:
        return None
    pid = int(pid_text)
    return pid if started_at(pid) == start else None


def _signal_session(pid: int, number: signal.Signals) -> None:
    try:
        os.killpg(pid, number)
    except OSError:
        try:
            os.kill(pid, number)
        except OSError:
            pass


def stop_owned(seconds: float, files: Iterable[Path]) -> None:
    """SIGTERM each process the files name that is still the one started (its session too: each runs in
    a session of its own), SIGKILL after SECONDS; a pid now another process's is never signalled."""
    running = []
    for file in files:
        pid = owned_pid(file)
        if pid is not None:
            _signal_session(pid, signal.SIGTERM)
            running.append(file)
    deadline = time.monotonic() + seconds
    while running and time.monotonic() < deadline:
        running = [file for file in running if owned_pid(file) is not None]
        if running:
            time.sleep(0.1)
    for file in running:
        pid = owned_pid(file)
        if pid is not None:
            _signal_session(pid, signal.SIGKILL)


def private_dir(*paths: Path) -> None:
    """Folders only root reads or writes (0700), made where missing."""
    for path in paths:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.chmod(0o700)


def mount_table() -> list[str]:
    """The mounts as "ID POINT" lines (the point escaped as /proc/self/mountinfo writes it)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [" ".join((fields[0], fields[4])) for fields in (line.split() for line in lines)]


def unescape_mount(point: str) -> str:
    """A mount point as mountinfo writes it (a space as \\040), as the file system names it."""
    return point.encode().decode("unicode_escape")


def mounts_since(before: Sequence[str] | None, prefixes: Iterable[Path | str]) -> list[str]:
    """Mount points under a prefix that are not in BEFORE (a mount_table taken before start), deepest
    first, unescaped; every one under the prefixes where BEFORE is empty."""
    if before is None:
        return []
    known = set(before)
    roots = [str(prefix) for prefix in prefixes]
    found = []
    for entry in mount_table():
        if entry in known:
            continue
        point = entry.partition(" ")[2]
        if any(point == root or point.startswith(root + "/") for root in roots):
            found.append(point)
    return [unescape_mount(point) for point in sorted(found, key=len, reverse=True)]


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (each v1 controller's, and the unified one)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2"):
            found.append(Path(fields[1]))
    return found
