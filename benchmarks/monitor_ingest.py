"""How fast the monitor takes in metric lines, and whether it stays fluid.

A writer process appends schema-1 step lines for 256 ranks to a run folder
(as 256 trainers would) at a fixed rate; the console's monitor screen
follows that run through the real local backend, headless at 120x40. We
report the lines/s the monitor ingested (folded in its metric reader, a
child process), the interval between its frames
(p50, p99, max) while it did, and how much its memory grew after 1,000,000
points. Targets: >= 50,000 lines/s, p99 frame interval < 100 ms, growth
<= 100 MB.

    .venv/bin/python benchmarks/monitor_ingest.py [--rate 60000] [--points 1000000] [--ranks 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
from console_procs import console_processes
from host import calibration

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from local_runs import end_launcher, live_launcher  # noqa: E402 - the tests' own run helpers


def writer(run_dir: str, ranks: int, rate: float, total: int, ready) -> None:
    """Append step lines round-robin over the ranks at ``rate`` lines/s."""
    files = [open(Path(run_dir) / "metrics" / f"rank-{r}.jsonl", "a") for r in range(ranks)]
    start = time.time()
    for r, f in enumerate(files):
        f.write(
            json.dumps(
                {
                    "schema": 1,
                    "event": "start",
                    "rank": r,
                    "local_rank": r % 8,
                    "world_size": ranks,
                    "host": f"node-{r // 8}",
                    "time": start,
                    "elapsed_s": 0.0,
                    "model": "resnet-fast",
                    "recipe": "fast",
                    "device": "cuda",
                    "backend": "nccl",
                    "precision": "bf16",
                    "epochs": 30,
                    "steps_per_epoch": 10_000,
                    "total_steps": 300_000,
                    "restart_count": 0,
                }
            )
            + "\n"
        )
        f.flush()
    ready.set()
    # Lines are written ten steps at a time per rank file (one write each), so
    # that this generator stays cheap: the monitor is what is measured, and on
    # a 2-core machine a costly writer would starve it.
    template = (
        '{"schema":1,"event":"step","rank":%d,"local_rank":%d,"world_size":%d,"host":"node-%d",'
        '"time":%.3f,"elapsed_s":%.3f,"epoch":1,"step":%d,"loss":%.5f,"lr":0.1,"samples_per_s":%.1f,'
        '"step_s":0.032,"data_s":0.001,"gpu_util":97,"gpu_mem_mb":10240}\n'
    )
    steps_per_write = 10
    written, step, t0 = 0, 0, time.perf_counter()
    while written < total:
        now = time.time()
        for r in range(ranks):
            files[r].write(
                "".join(
                    template
                    % (
                        r,
                        r % 8,
                        ranks,
                        r // 8,
                        now,
                        now - start,
                        step + k,
                        2.3 * (0.999 ** (step + k)) + (r % 7) * 0.001,
                        4000.0 - (r % 5),
                    )
                    for k in range(1, steps_per_write + 1)
                )
            )
            files[r].flush()
        step += steps_per_write
        written += ranks * steps_per_write
        ahead = written / rate - (time.perf_counter() - t0)
        if ahead > 0:
            time.sleep(ahead)
    for f in files:
        f.close()


def console_rss(me: psutil.Process) -> int:
    """The console's memory: its own process and the child that folds the
    metric stream for the monitor (not the writer)."""
    total = 0
    for proc in console_processes(me):
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


async def measure(state: Path, run_id: str, total: int, refresh_hz: float, warm_s: float = 0.0) -> dict:
    """``warm_s``: a soak's warm-up. Memory is then sampled each minute, and its growth and the
    longest frame are also given from the warm-up's end."""
    from torchdeck.backends.local import LocalBackend
    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.monitor import MonitorScreen

    me = psutil.Process()
    app = make_app(Settings(state_dir=state, refresh_hz=refresh_hz), LocalBackend(state), run_id)
    async with app.run_test(size=(120, 40)) as pilot:
        while not isinstance(app.screen, MonitorScreen):
            await pilot.pause(0.01)
        screen = app.screen
        while screen.snap.events < 256:
            await pilot.pause(0.01)
        rss0 = console_rss(me)
        t0, e0 = time.perf_counter(), screen.snap.events
        drawn0 = screen.frames_drawn
        seen = screen.frame_times[-1] if screen.frame_times else 0.0
        gaps: list[float] = []  # ms between frames; the screen keeps the last 512 or more (FRAMES_KEPT)
        warm_at: int | None = None  # gaps before the warm-up ended
        peak, warm_rss, samples = rss0, None, []
        limit = 300 if not warm_s else 2 * total / 1000 + 600
        while screen.snap.events < total + 256 and time.perf_counter() - t0 < limit:
            await pilot.pause(0.25)
            for began in [t for t in list(screen.frame_times) if t > seen]:
                gaps.append((began - seen) * 1000)
                seen = began
            rss = console_rss(me)
            peak = max(peak, rss)  # the reader ends with the stream: its peak, not its last
            elapsed = time.perf_counter() - t0
            if warm_s and warm_at is None and elapsed >= warm_s:
                warm_at, warm_rss = len(gaps), rss
            if warm_s and (not samples or elapsed - samples[-1][0] >= 60):
                samples.append((elapsed, rss / 2**20))
                print(f"  {elapsed / 60:5.1f} min  {screen.snap.events:,} lines  RSS {rss / 2**20:.1f} MB", flush=True)
        t1, e1 = time.perf_counter(), screen.snap.events
        drawn = screen.frames_drawn - drawn0
    after_warm = gaps[warm_at:] if warm_at is not None else []
    ordered = sorted(gaps[1:])
    result = {
        "lines": e1 - e0,
        "seconds": round(t1 - t0, 2),
        "lines_per_s": round((e1 - e0) / (t1 - t0)),
        "frames": len(ordered) + 1,
        "frames_drawn": drawn,
        "frame_ms_p50": round(statistics.median(ordered), 1),
        "frame_ms_p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
        "frame_ms_max": round(ordered[-1], 1),
        "rss_growth_mb": round((peak - rss0) / 2**20, 1),
        "rss_mb": round(peak / 2**20, 1),
    }
    if warm_s:
        result.update(
            warm_s=warm_s,
            # to the last minute's sample: by the loop's end the reader may have ended with the stream
            rss_growth_after_warm_mb=round(samples[-1][1] - (warm_rss or rss0) / 2**20, 1),
            rss_peak_growth_after_warm_mb=round((peak - (warm_rss or rss0)) / 2**20, 1),
            rss_samples_mb=[round(mb, 1) for _, mb in samples],
            frame_ms_max_after_warm=round(max(after_warm, default=0.0), 1),
            frames_over_250ms_after_warm=sum(g > 250 for g in after_warm),
        )
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=256)
    p.add_argument("--rate", type=float, default=60_000, help="lines/s the writer produces")
    p.add_argument("--points", type=int, default=1_000_000, help="step lines in all")
    p.add_argument("--refresh-hz", type=float, default=30.0, help="the console's frame rate (its default: 30)")
    p.add_argument(
        "--minutes", type=float, help="a soak: write for this long at --rate (sets --points) and say how memory grew"
    )
    p.add_argument("--warm-minutes", type=float, default=5.0, help="a soak's warm-up, not counted in its growth")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.minutes:
        a.points = int(a.rate * a.minutes * 60)
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        ready = mp.Event()
        proc = mp.Process(target=writer, args=(str(state / "runs" / "bench-ingest"), a.ranks, a.rate, a.points, ready))
        (state / "runs" / "bench-ingest" / "metrics").mkdir(parents=True)
        proc.start()
        run_id = "bench-ingest"
        launcher = live_launcher(state, run_id, a.ranks)  # the run stays live while the writer writes
        ready.wait(30)
        warm_s = a.warm_minutes * 60 if a.minutes else 0.0
        if a.minutes:
            print(calibration(), flush=True)
            print(f"soak: {a.ranks} ranks at {a.rate:,.0f} lines/s for {a.minutes:g} min", flush=True)
        try:
            result = asyncio.run(measure(state, run_id, a.points, a.refresh_hz, warm_s))
        finally:
            end_launcher(launcher)
        proc.join(timeout=60)
    result.update(ranks=a.ranks, writer_rate=a.rate, refresh_hz=a.refresh_hz)
    result["host"] = calibration()
    if a.json:
        print(json.dumps(result))
    else:
        print(result["host"])
        print(
            f"monitor ingest, {a.ranks} ranks, writer at {a.rate:,.0f} lines/s, {a.points:,} points, "
            f"drawn at up to {a.refresh_hz:g} Hz (120x40, headless)"
        )
        print(
            f"  ingested       {result['lines']:,} lines in {result['seconds']} s = "
            f"{result['lines_per_s']:,} lines/s   (target >= 50,000)"
        )
        print(
            f"  frame interval p50 {result['frame_ms_p50']} ms, p99 {result['frame_ms_p99']} ms, "
            f"max {result['frame_ms_max']} ms over {result['frames']} frames, "
            f"{result['frames_drawn']} with new data   (target p99 < 50 ms at 60,000 lines/s, < 100 ms at 120,000)"
        )
        print(
            f"  memory growth  {result['rss_growth_mb']} MB after {result['lines']:,} points "
            f"(peak RSS of the console and its metric reader {result['rss_mb']} MB)   (target <= 100 MB)"
        )
        if a.minutes:
            print(
                f"  soak: after the {a.warm_minutes:g}-minute warm-up, memory grew "
                f"{result['rss_growth_after_warm_mb']} MB (peak {result['rss_peak_growth_after_warm_mb']} MB; "
                f"target <= 20 MB); longest frame {result['frame_ms_max_after_warm']} ms, "
                f"{result['frames_over_250ms_after_warm']} over 250 ms (target: none)"
            )
            print(f"  RSS each minute (MB): {' '.join(str(mb) for mb in result['rss_samples_mb'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
