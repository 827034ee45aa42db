"""How the cluster and engine scripts, run as root, tell what they made (``scripts/cluster/owned.sh``):
a process by its pid and start time, a mount by the table taken at start, a root-only log folder.
No cluster and no root needed: the helpers run in bash here, on this test's own processes and folders."""

from __future__ import annotations

import re
import stat
import subprocess
import time
from pathlib import Path

from trainer_runs import REPO

OWNED = REPO / "scripts" / "cluster" / "owned.sh"


def owned(script: str, *args: str) -> subprocess.CompletedProcess:
    """``script`` run by bash with owned.sh sourced, as the scripts run it (set -euo pipefail)."""
    return subprocess.run(["bash", "-c", f'set -euo pipefail; source "{OWNED}"; {script}', "bash", *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def sleeper(program: str = "sleep") -> subprocess.Popen:
    """``sleep 600`` in a session of its own (as the scripts start theirs), once it runs the program."""
    process = subprocess.Popen([program, "600"], start_new_session=True)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{process.pid}/comm").read_text().strip() != Path(program).name[:15]:
        assert time.monotonic() < deadline, "the sleeper never ran its program"
        time.sleep(0.01)
    return process


def test_the_start_time_is_field_22_of_proc_stat_even_where_the_name_holds_spaces_and_parentheses(tmp_path):
    odd = tmp_path / "x) y (z"
    odd.symlink_to(subprocess.run(["which", "sleep"], capture_output=True, text=True).stdout.strip())
    process = sleeper(str(odd))
    try:
        assert Path(f"/proc/{process.pid}/comm").read_text().strip() == "x) y (z"
        done = owned('started_at "$1"', str(process.pid))
        assert done.stdout.strip() == start_time(process.pid) != ""
    finally:
        process.kill()
        process.wait()
    assert owned('started_at "$1"', str(process.pid)).stdout == ""


def test_a_pid_file_whose_pid_is_now_another_process_is_never_signalled(tmp_path):
    process = sleeper()
    record = tmp_path / "pid"
    try:
        # a record left by a crash: the pid now names a process that started at another time
        record.write_text(f"{process.pid} {int(start_time(process.pid)) + 1}\n")
        assert owned('owned_pid "$1"', str(record)).returncode == 1
        assert owned('stop_owned 1 "$1"', str(record)).returncode == 0
        assert process.poll() is None
        record.write_text(f"{process.pid}\n")  # an old script's record: a pid alone names nothing
        assert owned('stop_owned 1 "$1"', str(record)).returncode == 0
        assert process.poll() is None
        # the record the script writes as it starts a process names it, and stop_owned ends it
        assert owned('remember_pid "$1" "$2"', str(record), str(process.pid)).returncode == 0
        assert owned('owned_pid "$1"', str(record)).stdout.strip() == str(process.pid)
        assert owned('stop_owned 5 "$1"', str(record)).returncode == 0
        assert process.wait(timeout=10) == -15
    finally:
        process.kill()
        process.wait()


def test_only_mounts_missing_from_the_table_taken_at_start_are_the_scripts(tmp_path):
    table = owned("mount_table").stdout.splitlines()
    (proc,) = [line for line in table if line.split()[1] == "/proc"]
    snapshot = tmp_path / "mounts-before"
    snapshot.write_text("\n".join(line for line in table if line != proc) + "\n")
    # /proc stands in for a mount made after start; what was mounted under it before stays out
    assert owned('mounts_since "$1" /proc', str(snapshot)).stdout.splitlines() == ["/proc"]
    snapshot.write_text("\n".join(table) + "\n")
    assert owned('mounts_since "$1" /proc /sys /', str(snapshot)).stdout == ""
    assert owned('mounts_since "$1" /proc', str(tmp_path / "none")).stdout == ""  # no table: none
    every = owned("mounts_since /dev/null /proc").stdout.splitlines()
    assert every[-1] == "/proc" and all(m == "/proc" or m.startswith("/proc/") for m in every)
    assert owned("mounts_since /dev/null /pro").stdout == ""  # a prefix is a folder, not a string


def test_the_log_folders_are_made_for_root_alone_even_where_they_existed(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    assert owned('private_dir "$1" "$1/logs"', str(state)).returncode == 0
    assert stat.S_IMODE(state.stat().st_mode) == stat.S_IMODE((state / "logs").stat().st_mode) == 0o700


def test_no_script_writes_a_fixed_name_in_tmp():
    """Root writing ``>/tmp/NAME`` follows a symlink anyone planted there (fs.protected_symlinks=0)."""
    scripts = [
        p for p in (REPO / "scripts").rglob("*") if p.is_file() and p.suffix not in (".go", ".c", ".sum", ".mod")
    ]
    written = re.compile(r"(>>?|tee( -a)?|-o|--output)\s*['\"]?/tmp/|(?<![\w/])/tmp/torchdeck")
    found = [f"{p.relative_to(REPO)}: {line.strip()}" for p in scripts
             for line in p.read_text(errors="replace").splitlines() if written.search(line)]  # fmt: skip
    assert found == []
