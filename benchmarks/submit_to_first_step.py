"""From submit to the first step line of every rank: a 2-rank job through
the local backend (torchrun, c10d rendezvous, gloo), the built-in trainer on
the real CIFAR-10 subset (target: under 10 s), then, alternating in the same
run, a user script that prints its loss as text (examples/ddp/train_text.py,
read by rank_output; target: under 5 s). The submit's own checks (the
script, torch in the user's interpreter) are inside the time.

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

from host import calibration

from torchdeck.backends.local import LocalBackend
from torchdeck.backends.spec import Entrypoint, JobSpec, TrainerOptions

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
    print(calibration(), flush=True)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "cifar10-subset"))
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    builtin = JobSpec(
        name="bench",
        data_dir=a.data_dir,
        nproc_per_node=2,
        max_restarts=0,
        trainer=TrainerOptions(epochs=1, max_steps=5),
    )
    script = JobSpec(
        name="bench-script",
        nproc_per_node=2,
        max_restarts=0,
        entrypoint=Entrypoint(
            script="train_text.py", args=["--epochs", "1"], code=str(REPO / "examples" / "ddp"), python=sys.executable
        ),
    )
    times: dict[str, list[float]] = {"built-in trainer": [], "user script (text)": []}
    with tempfile.TemporaryDirectory() as state:
        backend = LocalBackend(state)
        for _ in range(a.repeats):
            for label, spec in zip(times, (builtin, script)):
                t0 = time.perf_counter()
                run_id = backend.submit(spec)
                seen = asyncio.run(first_steps(backend, run_id, t0, 2))
                times[label].append(max(seen.values()))
                print(f"  {run_id}: rank 0 at {seen[0]:.2f} s, rank 1 at {seen[1]:.2f} s")
                backend.cancel(run_id)
    for (label, found), target in zip(times.items(), (10, 5)):
        print(
            f"{label}: submit to first step of both ranks: median {statistics.median(found):.2f} s, "
            f"max {max(found):.2f} s ({a.repeats} runs; target < {target} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
