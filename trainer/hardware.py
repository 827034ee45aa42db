"""Which device, collective backend and numerics this rank uses, and what
its GPU is doing."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import lru_cache

import torch

from .errors import TrainerError
from .options import DEVICES, PRECISIONS, one_of


@dataclass(frozen=True)
class Placement:
    """Where one rank runs: ``device``, the process-group ``backend`` (gloo
    on CPU, nccl on CUDA) and the autocast dtype (None for fp32)."""

    device: torch.device
    backend: str
    amp_dtype: torch.dtype | None

    @property
    def precision(self) -> str:
        return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.amp_dtype]


@lru_cache(maxsize=1)
def cpu_has_bf16() -> bool:
    """True where the CPU has native bf16 arithmetic (AVX512-BF16 or AMX),
    which is where bf16 autocast is faster than fp32, not slower."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def choose_placement(device: str, precision: str, local_rank: int) -> Placement:
    """Resolve ``--device`` (one of ``DEVICES``) and ``--precision`` (one of ``PRECISIONS``)."""
    cuda = torch.cuda.is_available()
    if device == "cuda" and not cuda:
        raise TrainerError(
            "--device cuda was asked for, but CUDA is not available here",
            hint="use --device auto or cpu, or run on a GPU node",
        )
    if device not in DEVICES:
        raise TrainerError(f"unknown --device {device!r} (choose {one_of(DEVICES)})")
    if precision not in PRECISIONS:
        raise TrainerError(f"unknown --precision {precision!r} (choose {one_of(PRECISIONS)})")
    use_cuda = device == "cuda" or (device == "auto" and cuda)
    if use_cuda:
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise TrainerError(
                f"local rank {local_rank} has no GPU of its own: this node has {count}",
                hint="run at most one process per GPU (--nproc-per-node)",
            )
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if precision == "auto":
        if use_cuda:
            amp: torch.dtype | None = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        else:
            amp = torch.bfloat16 if cpu_has_bf16() else None
    elif precision == "fp32":
        amp = None
    elif precision == "bf16":
        amp = torch.bfloat16
    else:  # fp16
        if not use_cuda:
            raise TrainerError("--precision fp16 needs CUDA", hint="use bf16 or fp32 on a CPU")
        amp = torch.float16
    return Placement(dev, "nccl" if use_cuda else "gloo", amp)


class GpuProbe:
    """GPU utilisation and memory for the step lines. Utilisation comes from
    NVML (nvidia-ml-py) when it imports, else it is reported as null."""

    def __init__(self, device: torch.device):
        self.device = device
        self.enabled = device.type == "cuda"
        self._cpu_mark = (time.perf_counter(), time.process_time())
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self._cpu_most = 100.0 * cores
        """All the cores this process may use, in percent of one: what a sample never reads above."""
        self._handle = None
        self._nvml = None
        if self.enabled:
            try:
                import pynvml  # optional: nvidia-ml-py

                pynvml.nvmlInit()
                index = device.index or 0
                visible = os.environ.get("CUDA_VISIBLE_DEVICES")
                if visible:
                    ids = [v.strip() for v in visible.split(",") if v.strip()]
                    if index < len(ids) and ids[index].isdigit():
                        index = int(ids[index])
                self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                self._nvml = pynvml
            except Exception:
                self._handle = None

    def cpu_sample(self) -> dict[str, float]:
        """``cpu_util``: the rank's own CPU time since the last sample over the wall time between
        them, in percent of one core (its threads and data-loader threads, not its worker processes)."""
        now, used = time.perf_counter(), time.process_time()
        last, self._cpu_mark = self._cpu_mark, (now, used)
        if now <= last[0]:
            return {}
        # the kernel counts CPU time in ticks: over a short span the share can come out above what the
        # process's cores allow (205% on two, once); never more than all of them
        return {"cpu_util": round(min(100.0 * (used - last[1]) / (now - last[0]), self._cpu_most), 1)}

    def sample(self) -> dict[str, float | None]:
        """``cpu_util`` on every device; ``gpu_util`` and ``gpu_mem_mb`` on CUDA."""
        cpu: dict[str, float | None] = dict(self.cpu_sample())
        if not self.enabled:
            return cpu
        util = None
        if self._handle is not None:
            try:
                util = float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)  # type: ignore[union-attr]
            except Exception:
                util = None
        return cpu | {"gpu_util": util, "gpu_mem_mb": round(torch.cuda.memory_reserved(self.device) / 2**20, 1)}
