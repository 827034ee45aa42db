"""How fast `torchdeck jobs` lists a state folder of many finished runs (a user who trains daily
has thousands). Each run is made as the local backend leaves it (launch.json, exit.json, rank 0's
metric file with a few hundred lines, torchrun's attempt folder, and the status.json its launcher
writes as it exits). "cold" is the first `jobs` process after the runs ended; "warm" the median of
the next 5; "without status files" the first `jobs` over the same runs as an older torchdeck left
them, which works each status out from the run's files and writes status.json (once).
Targets (issue 17): with 2,000 runs, warm < 0.3 s, cold < 1 s.

    .venv/bin/python benchmarks/runs_list.py [--runs 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from host import calibration

from torchdeck.backends.local import LocalBackend

TORCHDECK = [sys.executable, "-m", "torchdeck"]


def make_run(runs: Path, i: int, steps: int = 300) -> None:
    run_id = f"bench-{i:05d}"
    run = runs / run_id
    (run / "metrics").mkdir(parents=True)
    (run / "logs" / f"{run_id}_x" / "attempt_0" / "0").mkdir(parents=True)
    at = 1_790_000_000.0 + i * 60
    launch = {"run_id": run_id, "name": "bench", "cmd": [], "env": {}, "cwd": ".", "port": 0}
    launch |= {"submitted_at": at, "world_size": 2, "host": "bench"}
    (run / "launch.json").write_text(json.dumps(launch))
    (run / "exit.json").write_text(json.dumps({"exit_code": 0 if i % 7 else 1, "finished_at": at + 50}))
    lines = [{"schema": 1, "event": "start", "rank": 0, "world_size": 2, "epochs": 3, "total_steps": steps}]
    lines += [
        {"schema": 1, "event": "step", "rank": 0, "world_size": 2, "step": s, "epoch": 1 + s * 3 // (steps + 1)}
        | {"loss": 2.0 / s, "samples_per_s": 900.0, "time": at + s / 10}
        for s in range(1, steps + 1)
    ]
    lines.append({"schema": 1, "event": "done", "rank": 0, "world_size": 2, "accuracy": 0.8, "time": at + 40})
    (run / "metrics" / "rank-0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def jobs_time(state: Path) -> float:
    env = {**os.environ, "TORCHDECK_STATE_DIR": str(state)}
    t = time.perf_counter()
    done = subprocess.run([*TORCHDECK, "jobs"], env=env, capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - t
    assert done.stdout.count("bench-") >= 1, done.stdout[:200]
    return elapsed


def runs_screen(state: Path, refreshes: int = 5) -> tuple[float, list[float]]:
    """The console's runs screen over the same folder, headless at 120x40: seconds from start to
    the table holding every run, and the time each later refresh (every 2 s) held the UI thread."""
    import asyncio

    from textual.widgets import DataTable

    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.home import HomeScreen

    held: list[float] = []
    handler = HomeScreen.on_runs_listed

    def timed(self, message):
        t = time.perf_counter()
        handler(self, message)
        held.append(time.perf_counter() - t)

    HomeScreen.on_runs_listed = timed  # type: ignore[method-assign]
    settings = Settings(state_dir=state, spec_file=state / "torchdeck.yaml", ascii=False)

    async def scenario() -> float:
        app = make_app(settings, LocalBackend(state))
        t = time.perf_counter()
        async with app.run_test(size=(120, 40)) as pilot:
            while not held:
                await pilot.pause(0.01)
            filled = time.perf_counter() - t
            assert app.screen.query_one("#runs", DataTable).row_count == len(list((state / "runs").iterdir()))
            while len(held) < refreshes + 1:
                await pilot.pause(0.1)
        return filled

    try:
        filled = asyncio.run(scenario())
    finally:
        HomeScreen.on_runs_listed = handler  # type: ignore[method-assign]
    return filled, held[1:]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=2000)
    args = p.parse_args()
    os.chdir(Path(__file__).resolve().parent.parent)
    print(calibration())
    state = Path(tempfile.mkdtemp(prefix="td-runs-"))
    try:
        for i in range(args.runs):
            make_run(state / "runs", i)
        backend = LocalBackend(state)
        for i in range(args.runs):
            backend.status(f"bench-{i:05d}")  # what each run's launcher does as it exits
        cold = jobs_time(state)
        warm = [jobs_time(state) for _ in range(5)]
        filled, refreshes = runs_screen(state)
        print(
            f"runs screen, {args.runs} runs: every run in the table {filled:.3f} s after start; each refresh "
            f"held the UI thread median {statistics.median(refreshes) * 1000:.0f} ms, max {max(refreshes) * 1000:.0f} ms"
        )
        for kept in (state / "runs").glob("*/status.json"):
            kept.unlink()
        legacy = jobs_time(state)
        print(
            f"torchdeck jobs, {args.runs} finished runs: cold {cold:.3f} s (target < 1 s), "
            f"warm median {statistics.median(warm):.3f} s, max {max(warm):.3f} s (target < 0.3 s); "
            f"without status files {legacy:.3f} s, once"
        )
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
