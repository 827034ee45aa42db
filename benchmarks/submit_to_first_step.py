"""From submit to the first step line of every rank: a 2-rank job on the
real CIFAR-10 subset through the local backend (torchrun, c10d rendezvous,
gloo). Target: under 10 s.

    .venv/bin/python benchmarks/submit_to_first_step.py [--data-dir DIR] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from torchdeck.backends.local import LocalBackend
from torchdeck.backends.spec import JobSpec, TrainerOptions

REPO = Path(__file__).resolve().parent.parent


async def first_steps(backend: LocalBackend, run_id: str, t0: float, ranks: int) -> dict[int, float]:
    seen: dict[int, float] = {}
    async for batch in backend.metrics(run_id, follow=True, poll_s=0.02):
        for event in batch:
            if event.event == "step" and event.rank not in seen:
                seen[event.rank] = time.perf_counter() - t0
        if len(seen) == ranks:
            return seen
    raise RuntimeError(f"{run_id} ended before every rank stepped: {backend.status(run_id)}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "cifar10-subset"))
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    times = []
    with tempfile.TemporaryDirectory() as state:
        backend = LocalBackend(state)
        for _ in range(a.repeats):
            spec = JobSpec(
                name="bench",
                data_dir=a.data_dir,
                nproc_per_node=2,
                max_restarts=0,
                trainer=TrainerOptions(epochs=1, max_steps=5),
            )
            t0 = time.perf_counter()
            run_id = backend.submit(spec)
            seen = asyncio.run(first_steps(backend, run_id, t0, 2))
            times.append(max(seen.values()))
            print(f"  {run_id}: rank 0 at {seen[0]:.2f} s, rank 1 at {seen[1]:.2f} s")
            backend.cancel(run_id)
    print(
        f"submit to first step of both ranks: median {statistics.median(times):.2f} s, max {max(times):.2f} s "
        f"({a.repeats} runs; target < 10 s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
