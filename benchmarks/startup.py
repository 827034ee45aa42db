"""How fast torchdeck starts: `torchdeck --help` (median of 10 runs) and the
console's first frame in a real terminal (tmux at 80x24; the time from
starting the process to its home screen being on the terminal, median of 5).
Targets (issue 17, on a 2-core host): --help < 0.1 s, first frame median < 0.5 s.

    .venv/bin/python benchmarks/startup.py
    .venv/bin/python benchmarks/startup.py --against 51b7883 [--pairs 9] [--load 2] [--no-bytecode]

``--against REV`` measures the first frame of this tree and of commit REV side by side on this
host, alternating (A, B, A, B...), and prints both medians and their ratio (issue 43's target:
this tree at most 0.8x of 51b7883). REV runs from a ``git worktree`` under the temporary folder,
imported through PYTHONPATH ahead of the editable install. ``--load N`` keeps N busy processes
running throughout (a loaded host). ``--no-bytecode`` compiles every module from source at each
start (``PYTHONDONTWRITEBYTECODE`` set in a checkout, as issue 43's figures were taken); by
default the bytecode is cached, as an installed torchdeck has it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from host import calibration

TORCHDECK = [sys.executable, "-m", "torchdeck"]


def help_time() -> float:
    t = time.perf_counter()
    subprocess.run([*TORCHDECK, "--help"], check=True, capture_output=True)
    return time.perf_counter() - t


def first_frame_time(state: str, pythonpath: str = "", bytecode: bool = True) -> tuple[float, float]:
    """The seconds to the first frame (the runs screen's title and its keys on the terminal) and to the runs
    listed (the empty state folder's "No runs yet", drawn once the backend has listed)."""
    session = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    tmux = ["tmux", "-L", session]
    path = f"PYTHONPATH={pythonpath} " if pythonpath else ""
    # as an installed console starts: with its bytecode cached (a shell may set PYTHONDONTWRITEBYTECODE);
    # --no-bytecode: every module compiled from source at each start, as from a checkout with it set
    cache = "-u PYTHONDONTWRITEBYTECODE" if bytecode else "PYTHONDONTWRITEBYTECODE=1"
    cmd = f"env {cache} {path}TORCHDECK_STATE_DIR={state} {' '.join(TORCHDECK)}"
    t = time.perf_counter()
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd], check=True)
    frame = 0.0
    try:
        while time.perf_counter() - t < 20:
            shown = subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
            if not frame and "runs on the local backend" in shown and "n New" in shown:  # the title and the keys
                frame = time.perf_counter() - t
            if frame and "No runs yet" in shown:
                return frame, time.perf_counter() - t
            time.sleep(0.01)
        raise RuntimeError("the console never drew its home screen and its runs")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def checkout(rev: str, where: Path) -> str:
    """REV's tree as an importable ``torchdeck`` (a PYTHONPATH entry), from a git worktree."""
    tree = where / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], check=True, capture_output=True)
    (where / "path").mkdir()
    (where / "path" / "torchdeck").symlink_to(tree)
    return str(where / "path")


def drop_bytecode(tree: Path) -> None:
    """Remove a tree's own __pycache__ folders (not its virtual environments'): with
    PYTHONDONTWRITEBYTECODE its modules are then compiled at every start, Textual's are not."""
    import shutil

    for cache in tree.rglob("__pycache__"):
        if not any(part.startswith((".venv", ".git")) for part in cache.relative_to(tree).parts):
            shutil.rmtree(cache, ignore_errors=True)


def busy() -> None:
    while True:
        pass


def side_by_side(rev: str, pairs: int, load: int, bytecode: bool = True) -> None:
    import multiprocessing

    workers = [multiprocessing.Process(target=busy, daemon=True) for _ in range(load)]
    for w in workers:
        w.start()
    with tempfile.TemporaryDirectory() as tmp:
        other = checkout(rev, Path(tmp))
        try:
            with tempfile.TemporaryDirectory() as state:
                first_frame_time(state)  # both warm: bytecode written, files in the page cache
                first_frame_time(state, other)
                if not bytecode:
                    drop_bytecode(Path.cwd())
                    drop_bytecode(Path(tmp) / "tree")
                mine, theirs, mine_listed, theirs_listed = [], [], [], []
                for _ in range(pairs):
                    frame, listed = first_frame_time(state, bytecode=bytecode)
                    mine.append(frame)
                    mine_listed.append(listed)
                    frame, listed = first_frame_time(state, other, bytecode=bytecode)
                    theirs.append(frame)
                    theirs_listed.append(listed)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(Path(tmp) / "tree")], capture_output=True)
            for w in workers:
                w.terminate()
    a, b = statistics.median(mine), statistics.median(theirs)
    print(
        f"first frame, this tree  median {a:.3f} s  ({', '.join(f'{x:.2f}' for x in mine)})\n"
        f"first frame, {rev:<10}  median {b:.3f} s  ({', '.join(f'{x:.2f}' for x in theirs)})\n"
        f"ratio {a / b:.2f} (tmux 80x24, {pairs} pairs alternating, {load} busy process(es) beside them, "
        f"{'bytecode cached' if bytecode else 'no bytecode: every module compiled at start'})\n"
        f"runs listed, this tree  median {statistics.median(mine_listed):.3f} s; {rev}: "
        f"{statistics.median(theirs_listed):.3f} s (after the first frame here; with it there)"
    )


def main() -> int:
    print(calibration(), flush=True)
    os.chdir(Path(__file__).resolve().parent.parent)
    if "--against" in sys.argv:
        args = sys.argv[1:]
        value = lambda flag, default: args[args.index(flag) + 1] if flag in args else default  # noqa: E731
        side_by_side(
            value("--against", ""), int(value("--pairs", "9")), int(value("--load", "0")), "--no-bytecode" not in args
        )
        return 0
    helps = [help_time() for _ in range(10)]
    with tempfile.TemporaryDirectory() as state:
        frames = [first_frame_time(state)[0] for _ in range(5)]
    print(
        f"torchdeck --help      median {statistics.median(helps):.3f} s, max {max(helps):.3f} s (10 runs; target < 0.1 s)"
    )
    print(
        f"console first frame   median {statistics.median(frames):.3f} s, max {max(frames):.3f} s "
        f"(tmux 80x24, 5 runs; target median < 0.5 s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
