"""How fast torchdeck starts: `torchdeck --help` (median of 10 runs) and the
console's first frame in a real terminal (tmux at 80x24; the time from
starting the process to its home screen being on the terminal, median of 5).
Targets (issue 17, on a 2-core host): --help < 0.1 s, first frame median < 0.5 s.

    .venv/bin/python benchmarks/startup.py
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


def first_frame_time(state: str) -> float:
    session = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    tmux = ["tmux", "-L", session]
    cmd = f"env TORCHDECK_STATE_DIR={state} {' '.join(TORCHDECK)}"
    t = time.perf_counter()
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd], check=True)
    try:
        while time.perf_counter() - t < 20:
            shown = subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
            if "runs on the local backend" in shown:
                return time.perf_counter() - t
            time.sleep(0.01)
        raise RuntimeError("the console never drew its home screen")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def main() -> int:
    print(calibration(), flush=True)
    os.chdir(Path(__file__).resolve().parent.parent)
    helps = [help_time() for _ in range(10)]
    with tempfile.TemporaryDirectory() as state:
        frames = [first_frame_time(state) for _ in range(5)]
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
