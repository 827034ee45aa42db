"""A short calibration of the host, printed by every benchmark so that its figures from one
machine can be read against another's: the CPU model, its cores, and the time of a fixed
pure-Python workload (best of 5; a slower host takes longer in proportion, roughly, for the
console's own Python work)."""

from __future__ import annotations

import os
import platform
import time


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def workload() -> float:
    """Seconds for a fixed mix of what the console does: dict and string work, JSON-like parsing,
    float arithmetic (about 0.1 s on a 2020s laptop core)."""
    start = time.perf_counter()
    table: dict[str, float] = {}
    total = 0.0
    for i in range(200_000):
        key = f"rank-{i % 512}"
        value = float(str(i * 7 % 1000)) / 3.0
        table[key] = table.get(key, 0.0) * 0.9 + value
        total += value * value
    assert total > 0
    return time.perf_counter() - start


def calibration() -> str:
    best = min(workload() for _ in range(5))
    features = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
        features = " ".join(x for x in ("avx2", "avx512f", "avx512_bf16") if f" {x}" in flags)
    except OSError:
        pass
    return f"host: {cpu_model()}, {os.cpu_count()} cores{', ' + features if features else ''}; calibration {best * 1000:.0f} ms"


if __name__ == "__main__":
    print(calibration())
