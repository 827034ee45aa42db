"""What torchdeck's reading costs a user's training: the same script, bare under torchrun and under
``torchdeck train`` (its rank wrapper passing the output through and reading every line, every
progress-bar redraw and the logger files), alternating, on 2 ranks. The script times its own steps
and prints its samples/s at the end; we print both, and the ratio. Target: under 2% slower, with a
line per step per rank and with a tqdm bar at its default refresh.

On a shared 2-core host one run's speed differs from the next by up to 10%, more than the target, so
a second figure is printed that noise moves far less: the CPU time the rank wrappers used against the
CPU time of the ranks they served (read from /proc as the runs go). With the ranks using every core,
as here, that time is taken from the training: it is the cost itself.

    .venv/bin/python benchmarks/user_code_overhead.py [--rounds 6] [--steps 1500]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
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


def torchdeck(folder: Path, state: Path, steps: int, mode: str) -> tuple[float, float, float, float]:
    """samples/s, and the CPU seconds of the rank wrappers, of the console's other processes and of the
    ranks' scripts."""
    env = {**os.environ, "TORCHDECK_STATE_DIR": str(state)}
    cpu = CpuTimes()
    cpu.start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "torchdeck", "train", "train.py", "--nproc-per-node", "2", "--python",
             sys.executable, "--", str(steps), mode],
            cwd=folder, capture_output=True, text=True, timeout=900, env=env,
        )  # fmt: skip
    finally:
        cpu.stop()
    run = sorted((state / "runs").iterdir())[-1]
    log = "".join(p.read_text(errors="replace") for p in run.glob("logs/*/attempt_0/0/*.log"))
    return result(done.stdout + done.stderr + log), cpu.total("wrappers"), cpu.total("console"), cpu.total("ranks")


class CpuTimes(threading.Thread):
    """The CPU seconds (user + system) of this machine's processes, by command line, sampled every
    50 ms from /proc while a run goes: each process's last sample (a process that ends loses at
    most its last 50 ms)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: dict[int, tuple[str, float]] = {}
        self.done = threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK")

    def run(self) -> None:
        while not self.done.wait(0.05):
            for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if "train.py" in cmdline or "torchdeck" in cmdline:
                    self.seen[pid] = (cmdline, (int(fields[11]) + int(fields[12])) / self.tick)

    def stop(self) -> None:
        self.done.set()
        self.join()

    def total(self, kind: str) -> float:
        """The CPU seconds of the rank wrappers (``wrappers``), of the console's other processes (the
        ``train`` command following the run, the launcher: ``console``), or of the ranks' scripts."""

        def of(cmdline: str) -> str:
            if "torch.distributed.run" in cmdline:  # first: its command line names the wrapper too
                return "torchrun"
            if "torchdeck.backends.rank_output" in cmdline:
                return "wrappers"
            return "console" if "-m torchdeck" in cmdline else "ranks" if "-u train.py" in cmdline else ""

        return sum(cpu for pid, (cmdline, cpu) in self.seen.items() if of(cmdline) == kind and pid != os.getpid())


def result(text: str) -> float:
    found = re.findall(r"RESULT ([\d.]+) samples/s", text)
    if not found:
        raise SystemExit(f"no result in the output: {text[-800:]}")
    return float(found[-1])


def main() -> int:
    print(calibration(), flush=True)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=1500)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder, state = Path(tmp) / "code", Path(tmp) / "state"
        folder.mkdir()
        (folder / "train.py").write_text(SCRIPT)
        for mode in ("lines", "tqdm"):
            figures: dict[str, list[float]] = {"bare": [], "torchdeck": []}
            wrappers = console = ranks = 0.0
            for n in range(a.rounds):  # alternating, so that a noisy neighbour weighs on both alike
                order = ("bare", "torchdeck") if n % 2 == 0 else ("torchdeck", "bare")
                for which in order:
                    if which == "bare":
                        figures["bare"].append(bare(folder, a.steps, mode))
                        continue
                    speed, wrapper_cpu, console_cpu, rank_cpu = torchdeck(folder, state, a.steps, mode)
                    figures["torchdeck"].append(speed)
                    wrappers, console, ranks = wrappers + wrapper_cpu, console + console_cpu, ranks + rank_cpu
            b, t = statistics.median(figures["bare"]), statistics.median(figures["torchdeck"])
            print(
                f"{mode:5}: bare {b:8.1f} samples/s (runs {', '.join(f'{v:.0f}' for v in figures['bare'])}); "
                f"torchdeck {t:8.1f} samples/s (runs {', '.join(f'{v:.0f}' for v in figures['torchdeck'])}); "
                f"torchdeck/bare {t / b:.3f} ({(1 - t / b) * 100:+.1f}% slower)",
                flush=True,
            )
            print(
                f"{mode:5}: in {a.rounds} runs the ranks used {ranks:.2f} CPU s; the rank wrappers {wrappers:.2f} s "
                f"({wrappers / ranks * 100:.2f}% of the ranks'), the console following the run {console:.2f} s "
                f"({console / ranks * 100:.2f}%, its start included)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
