"""How fast a comparison of finished runs opens and redraws (issue 34): 8 runs of 64 ranks x
10,000 steps each. Each run is a local run folder as the backend leaves it (launch.json,
exit.json, spec.yaml) with the digest its launcher makes as the run ends, made here from the same
number of metric events (5.12 million in all; "digest" is that one-off cost per run). "open" is
what the console and `torchdeck compare` do: each run's status, spec and digest, then the table;
"redraw" is the chart at 120x40 (one line a run) and at a line a rank (8 lines).
Targets: open < 1 s, redraw < 100 ms.

    .venv/bin/python benchmarks/compare_open.py [--runs 8 --ranks 64 --steps 10000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from torchdeck.backends.base import MetricEvent
from torchdeck.backends.local import LocalBackend
from torchdeck.backends.run_digest import DigestStore, RunDigest
from torchdeck.backends.spec import JobSpec
from torchdeck.monitor.compare import Comparison, load_run
from torchdeck.tui.widgets.loss_chart import build_chart


def make_run(runs: Path, i: int, ranks: int, steps: int) -> float:
    """One finished run's folder and digest; returns the seconds its digest took to make."""
    run_id = f"bench-lr{i}"
    run = runs / run_id
    run.mkdir(parents=True)
    at = 1_790_000_000.0 + i * 3600
    launch = {"run_id": run_id, "name": "bench", "submitted_at": at, "world_size": ranks, "host": "bench"}
    (run / "launch.json").write_text(json.dumps(launch))
    (run / "exit.json").write_text(json.dumps({"exit_code": 0, "finished_at": at + 1800}))
    spec = JobSpec(name="bench", nproc_per_node=ranks)
    spec.entrypoint.script, spec.entrypoint.args = "train.py", ["--lr", str(0.1 / (i + 1))]
    (run / "spec.yaml").write_text(spec.to_yaml())
    started = time.perf_counter()
    digest = RunDigest(run_id)
    lr = 0.1 / (i + 1)
    for rank in range(ranks):
        batch = [
            MetricEvent(
                "step", rank, at + s, {"step": s, "loss": 2.3 / (1 + lr * s) + rank * 1e-3, "samples_per_s": 500.0}
            )
            for s in range(1, steps + 1)
        ]
        digest.ingest(batch)
    digest.complete = True
    (run / "digest.json").write_bytes(digest.to_bytes())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        digests = [make_run(state / "runs", i, args.ranks, args.steps) for i in range(args.runs)]
        print(
            f"digest: {statistics.median(digests):.2f} s a run ({args.ranks * args.steps:,} events; made once, as it ends)"
        )
        run_ids = [f"bench-lr{i}" for i in range(args.runs)]
        opens, redraws, rank_redraws = [], [], []
        for _ in range(5):
            started = time.perf_counter()
            backend, store = LocalBackend(state), DigestStore(state)
            comparison = Comparison([load_run(backend, store, r) for r in run_ids])
            comparison.rows()
            curves = comparison.mean_curves()
            opens.append(time.perf_counter() - started)
            started = time.perf_counter()
            build_chart(curves, 120, 24, "braille", {i: r.label for i, r in enumerate(comparison.runs)})
            comparison.rows()
            redraws.append(time.perf_counter() - started)
            started = time.perf_counter()
            ranked, names = comparison.rank_curves(8)
            build_chart(ranked, 120, 24, "braille", dict(enumerate(names)))
            rank_redraws.append(time.perf_counter() - started)
        print(
            f"open {args.runs} runs of {args.ranks} ranks x {args.steps:,} steps: median {statistics.median(opens):.3f} s (target < 1 s)"
        )
        print(f"redraw, a line a run: median {statistics.median(redraws) * 1000:.1f} ms (target < 100 ms)")
        print(f"redraw, a line a rank: median {statistics.median(rank_redraws) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
