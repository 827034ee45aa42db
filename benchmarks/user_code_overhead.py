"""What torchdeck's reading costs a user's training: the same script, bare under torchrun and under
``torchdeck train`` (its rank wrapper passing the output through and reading every line, every
progress-bar redraw and the logger files), alternating, on 2 ranks. The script times its own steps
and prints its samples/s at the end; we print both, and the ratio. Target: under 2% slower, with a
line per step per rank and with a tqdm bar at its default refresh.

    .venv/bin/python benchmarks/user_code_overhead.py [--rounds 4] [--steps 1500]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from host import calibration

REPO = Path(__file__).resolve().parent.parent

SCRIPT = """
import os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.set_num_threads(1)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
steps, batch, bar = int(sys.argv[1]), 64, sys.argv[2] == "tqdm"
x, y = torch.randn(batch, 256), torch.randint(0, 10, (batch,))
loop = range(steps)
if bar:
    from tqdm import tqdm
    loop = tqdm(loop, desc="Epoch 0")
start = None
for step in loop:
    if step == 50:
        dist.barrier(); start = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    if bar:
        loop.set_postfix(loss=f"{loss.item():.4f}")
    else:
        print(f"step {step}/{steps} loss: {loss.item():.4f}", flush=True)
dist.barrier()
if dist.get_rank() == 0:
    print(f"RESULT {(steps - 50) * batch * dist.get_world_size() / (time.perf_counter() - start):.1f} samples/s",
          file=sys.stderr, flush=True)
dist.destroy_process_group()
"""


def bare(folder: Path, steps: int, mode: str) -> float:
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "train.py", str(steps), mode],
        cwd=folder, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return result(done.stdout + done.stderr)


def torchdeck(folder: Path, state: Path, steps: int, mode: str) -> float:
    env = {**os.environ, "TORCHDECK_STATE_DIR": str(state)}
    done = subprocess.run(
        [sys.executable, "-m", "torchdeck", "train", "train.py", "--nproc-per-node", "2", "--python", sys.executable,
         "--", str(steps), mode],
        cwd=folder, capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    run = sorted((state / "runs").iterdir())[-1]
    log = "".join(p.read_text(errors="replace") for p in run.glob("logs/*/attempt_0/0/*.log"))
    return result(done.stdout + done.stderr + log)


def result(text: str) -> float:
    found = re.findall(r"RESULT ([\d.]+) samples/s", text)
    if not found:
        raise SystemExit(f"no result in the output: {text[-800:]}")
    return float(found[-1])


def main() -> int:
    print(calibration(), flush=True)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=1500)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder, state = Path(tmp) / "code", Path(tmp) / "state"
        folder.mkdir()
        (folder / "train.py").write_text(SCRIPT)
        for mode in ("lines", "tqdm"):
            figures: dict[str, list[float]] = {"bare": [], "torchdeck": []}
            for n in range(a.rounds):  # alternating, so that a noisy neighbour weighs on both alike
                order = ("bare", "torchdeck") if n % 2 == 0 else ("torchdeck", "bare")
                for which in order:
                    got = bare(folder, a.steps, mode) if which == "bare" else torchdeck(folder, state, a.steps, mode)
                    figures[which].append(got)
            b, t = statistics.median(figures["bare"]), statistics.median(figures["torchdeck"])
            print(
                f"{mode:5}: bare {b:8.1f} samples/s (runs {', '.join(f'{v:.0f}' for v in figures['bare'])}); "
                f"torchdeck {t:8.1f} samples/s (runs {', '.join(f'{v:.0f}' for v in figures['torchdeck'])}); "
                f"torchdeck/bare {t / b:.3f} ({(1 - t / b) * 100:+.1f}% slower)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
