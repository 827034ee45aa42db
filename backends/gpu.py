"""GPU utilisation and memory of this machine through NVML (the
nvidia-ml-py package), or the reason there are no figures."""

from __future__ import annotations

import threading
import types

from .base import GpuMetrics

_lock = threading.Lock()
_state: dict[str, object] = {}


def _nvml() -> types.ModuleType | str:
    """The initialised pynvml module, or a string saying why there is none.
    NVML is initialised once per process; a failure is remembered."""
    with _lock:
        if "module" not in _state:
            try:
                import pynvml  # nvidia-ml-py

                pynvml.nvmlInit()
                _state["module"] = pynvml
            except ImportError:
                _state["module"] = "no GPU (nvidia-ml-py is not installed)"
            except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
                text = str(exc) or type(exc).__name__
                _state["module"] = (
                    "no GPU"
                    if "not found" in text.lower() or "driver" in text.lower()
                    else f"no GPU figures: NVML: {text}"
                )
        found = _state["module"]
        assert isinstance(found, (str, types.ModuleType))
        return found


def read_gpus() -> tuple[list[GpuMetrics], str]:
    """This machine's GPUs now, and a note ("no GPU") where there are none."""
    nvml = _nvml()
    if isinstance(nvml, str):
        return [], nvml
    gpus = []
    try:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GpuMetrics(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    util_percent=float(util.gpu),
                    mem_used_mb=mem.used / 2**20,
                    mem_total_mb=mem.total / 2**20,
                )
            )
    except Exception as exc:  # a GPU that falls off the bus mid-run
        return gpus, f"NVML: {exc}"
    return gpus, "" if gpus else "no GPU"
