"""The processes a benchmark counts as the console: its own, and the metric reader the monitor
starts (``python -m torchdeck.monitor.feed``), not the writer or the API server beside them."""

from __future__ import annotations

import psutil


def console_processes(me: psutil.Process) -> list[psutil.Process]:
    """``me`` first, then its metric readers."""
    readers = []
    for child in me.children(recursive=True):
        try:
            if "torchdeck.monitor.feed" in " ".join(child.cmdline()):
                readers.append(child)
        except psutil.Error:
            pass
    return [me, *readers]
