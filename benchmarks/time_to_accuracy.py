"""Time to accuracy: the seed recipe and torchdeck's default recipe side by
side, N ranks under torchrun on this machine, on the real CIFAR-10 subset.

    .venv/bin/python benchmarks/time_to_accuracy.py [--data-dir D] [--nproc 2]

Runs, one after the other, in one invocation so that the ratios compare like
with like on a shared machine:
  1. the trainer with --recipe seed (seed-cnn, 10 epochs), checkpoints each epoch;
  2. the trainer with its defaults (what a user gets without tuning);
  3. images/s, --repeats times in turn: the seed workshop's own script design
     (benchmarks/seed_script.py), the trainer with --recipe seed and its
     metrics and per-epoch checkpoints, and the same without checkpoints or
     step lines.
Times are from launching torchrun, start-up included. Prints the figures and
the ratios; --json FILE also writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from host import calibration

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = Path(os.environ.get("TORCHDECK_TEST_DATA", REPO.parent / "shared" / "data" / "cifar10-subset"))


def torchrun(nproc: int, *args: str) -> tuple[list[dict], float, float]:
    """Run a torchrun job; returns its JSON lines, its launch time and its wall time."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "127.0.0.1:0",
        *args,
    ]
    launched = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.time() - launched
    if proc.returncode != 0:
        sys.exit(f"benchmark job failed ({' '.join(args[:3])}):\n{proc.stderr[-2000:]}")
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return lines, launched, wall


def images_per_s(lines: list[dict], skip_first: bool = True) -> float:
    """Training images/s of the whole job: per epoch, the ranks' rates summed;
    the median over epochs (the first, with its warm-up, left out)."""
    by_epoch: dict = {}
    for r in lines:
        if r.get("event") == "epoch":
            by_epoch[r["epoch"]] = by_epoch.get(r["epoch"], 0.0) + r["samples_per_s"]
    first = {k for k in by_epoch if (k[1] if isinstance(k, tuple) else k) == 1}
    rates = [v for k, v in by_epoch.items() if not (skip_first and k in first and len(by_epoch) > len(first))]
    return statistics.median(rates)


def tag(lines: list[dict], rep: int) -> list[dict]:
    """Number the epochs of repeated runs apart, so their rates are not summed together."""
    return [dict(r, epoch=(rep, r["epoch"])) if r.get("event") == "epoch" else r for r in lines]


def train_s(lines: list[dict]) -> float:
    """Rank 0's wall time from its first step to done: training, evaluation and snapshots."""
    return next(r["train_s"] for r in lines if r.get("event") == "done" and r["rank"] == 0)


def curve(lines: list[dict], launched: float) -> list[tuple[float, float]]:
    """(seconds since launch, test accuracy) after each epoch, from rank 0."""
    return [(r["time"] - launched, r["accuracy"]) for r in lines if r.get("event") == "eval" and r["rank"] == 0]


def main() -> int:
    print(calibration(), flush=True)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--throughput-epochs", type=int, default=3, help="epochs of each images/s run")
    p.add_argument("--repeats", type=int, default=2, help="rounds of the images/s runs, interleaved")
    p.add_argument("--json", type=Path, help="also write the figures here")
    a = p.parse_args()
    if not (a.data_dir / "cifar-10-batches-py" / "test_batch").is_file():
        sys.exit(f"no CIFAR-10 at {a.data_dir} (set --data-dir or TORCHDECK_TEST_DATA)")
    data = str(a.data_dir)

    def trainer(*args: str) -> tuple[list[dict], float, float]:
        """torchdeck's trainer on ``a.nproc`` ranks over the data folder."""
        return torchrun(a.nproc, "-m", "torchdeck.trainer", "--data-dir", data, *args)

    with tempfile.TemporaryDirectory() as tmp:
        print(f"1/3 seed recipe, {a.nproc} ranks, 10 epochs ...", flush=True)
        seed_lines, seed_t0, seed_wall = trainer("--recipe", "seed", "--checkpoint-dir", f"{tmp}/seed")
        print(f"2/3 default recipe, {a.nproc} ranks ...", flush=True)
        fast_lines, fast_t0, fast_wall = trainer("--checkpoint-dir", f"{tmp}/fast")
        ref_lines: list[dict] = []
        full_lines: list[dict] = []
        bare_lines: list[dict] = []
        full_wall: list[float] = []
        bare_wall: list[float] = []
        epochs = str(a.throughput_epochs)
        for rep in range(a.repeats):
            print(
                f"3/3 images/s, round {rep + 1} of {a.repeats}: seed script, seed recipe, seed recipe bare ...",
                flush=True,
            )
            lines, _, _ = torchrun(
                a.nproc,
                str(REPO / "benchmarks" / "seed_script.py"),
                "--data-dir",
                data,
                "--epochs",
                epochs,
                "--checkpoint-file",
                f"{tmp}/seed-script.pth",
            )
            ref_lines += tag(lines, rep)
            lines, _, _ = trainer("--recipe", "seed", "--epochs", epochs, "--checkpoint-dir", f"{tmp}/full{rep}")
            full_lines += tag(lines, rep)
            full_wall.append(train_s(lines))
            lines, _, _ = trainer("--recipe", "seed", "--epochs", epochs, "--log-every", "1000000")
            bare_lines += tag(lines, rep)
            bare_wall.append(train_s(lines))

    seed_curve, fast_curve = curve(seed_lines, seed_t0), curve(fast_lines, fast_t0)
    seed_best = max(acc for _, acc in seed_curve)
    seed_best_at = next(t for t, acc in seed_curve if acc == seed_best)
    seed_done_at = seed_curve[-1][0]
    fast_match_at = next((t for t, acc in fast_curve if acc >= seed_best), None)
    fast_best_in_budget = max((acc for t, acc in fast_curve if t <= seed_done_at), default=0.0)
    fast_best = max(acc for _, acc in fast_curve)
    rates = {
        "seed_recipe_10_epochs": images_per_s(seed_lines),
        "default_recipe": images_per_s(fast_lines),
        "seed_script": images_per_s(ref_lines),
        "seed_recipe": images_per_s(full_lines),
        "seed_recipe_bare": images_per_s(bare_lines),
    }
    wall_cost = 1 - statistics.median(bare_wall) / statistics.median(full_wall)
    figures = {
        "nproc": a.nproc,
        "seed_best_accuracy": seed_best,
        "seed_best_at_s": round(seed_best_at, 1),
        "seed_10_epochs_s": round(seed_done_at, 1),
        "seed_wall_s": round(seed_wall, 1),
        "default_matches_seed_best_at_s": None if fast_match_at is None else round(fast_match_at, 1),
        "time_ratio_default_to_seed": None if fast_match_at is None else round(fast_match_at / seed_best_at, 3),
        "default_best_within_seed_time": fast_best_in_budget,
        "default_best_accuracy": fast_best,
        "default_done_s": round(fast_curve[-1][0], 1),
        "default_epochs": len(fast_curve),
        "images_per_s": {k: round(v, 1) for k, v in rates.items()},
        "seed_recipe_vs_seed_script": round(rates["seed_recipe"] / rates["seed_script"], 3),
        "metrics_and_checkpoint_cost": round(1 - rates["seed_recipe"] / rates["seed_recipe_bare"], 4),
        "metrics_and_checkpoint_wall_cost": round(wall_cost, 4),
        "train_s": {"seed_recipe": full_wall, "seed_recipe_bare": bare_wall},
        "seed_curve": [(round(t, 1), a_) for t, a_ in seed_curve],
        "default_curve": [(round(t, 1), a_) for t, a_ in fast_curve],
    }
    print()
    print(
        f"seed recipe:    best test accuracy {seed_best:.1%} at {seed_best_at:.0f} s; "
        f"10 epochs done at {seed_done_at:.0f} s"
    )
    if fast_match_at is None:
        print(f"default recipe: never reached {seed_best:.1%}")
    else:
        print(
            f"default recipe: reached {seed_best:.1%} at {fast_match_at:.1f} s "
            f"= {fast_match_at / seed_best_at:.2f} x the seed's time (target <= 0.25)"
        )
    print(
        f"default recipe: best {fast_best_in_budget:.1%} within the seed's {seed_done_at:.0f} s "
        f"(target >= 72%); best overall {fast_best:.1%}, finished at {fast_curve[-1][0]:.0f} s"
    )
    print("images/s (training, all ranks): " + ", ".join(f"{k} {v:.0f}" for k, v in rates.items()))
    print(
        f"seed recipe in torchdeck vs the seed's script design: {figures['seed_recipe_vs_seed_script']:.2f} x "
        f"(target >= 1.00)"
    )
    print(
        f"cost of metrics and checkpoints: {figures['metrics_and_checkpoint_cost']:.1%} of training images/s, "
        f"{wall_cost:.1%} of wall time with evaluation and snapshots (target < 3%)"
    )
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
