"""How soon a rank takes its first step inside the training image, against the same run on this
machine: the built-in trainer on 2 ranks (``--max-steps 3``, the CIFAR-10 subset), run by
``torchdeck train`` with and without ``--in-image``, alternating; the seconds from the submit to
each run's first step record, and the whole run's. Issue 32's target: the first step within 5 s of
the start, as locally. Needs a container engine and an image built here:

    scripts/docker-engine.sh start   # where the machine has none (prints the DOCKER_HOST to export)
    torchdeck image build --no-push --torch-index https://pypi.org/simple --torch-wheels /opt/wheels
    .venv/bin/python benchmarks/in_image_start.py IMAGE [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from host import calibration

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data" / "cifar10-subset"


def run(state: Path, image: str | None) -> tuple[float, float]:
    """(seconds to the first step, seconds to the end) of one run."""
    env = {**os.environ, "TORCHDECK_STATE_DIR": str(state)}
    args = ["train", "--data-dir", str(DATA), "--max-steps", "3", "--batch-size", "32", "--nproc-per-node", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "torchdeck", *args, *(["--in-image", image] if image else [])],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stdout[-800:] + done.stderr[-800:])
    run_dir = max((state / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    launched = json.loads((run_dir / "launch.json").read_text())["submitted_at"]
    records = [json.loads(line) for line in (run_dir / "metrics" / "rank-0.jsonl").read_text().splitlines()]
    first = min(r["time"] for r in records if r.get("event") == "step")
    ended = json.loads((run_dir / "exit.json").read_text())["finished_at"]
    return first - launched, ended - launched


def main() -> int:
    print(calibration(), flush=True)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("image")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    figures: dict[str, list[tuple[float, float]]] = {"here": [], "in the image": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(a.rounds):
            order = ("here", "in the image") if n % 2 == 0 else ("in the image", "here")
            for which in order:
                figures[which].append(run(Path(tmp), a.image if which == "in the image" else None))
    for which, got in figures.items():
        firsts, ends = [f for f, _ in got], [e for _, e in got]
        print(
            f"{which:12}: first step {statistics.median(firsts):5.2f} s after the submit "
            f"(runs {', '.join(f'{f:.2f}' for f in firsts)}); whole run {statistics.median(ends):5.2f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
