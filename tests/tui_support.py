"""Helpers for the console's tests.

``FixedNodesBackend`` is the real LocalBackend with one gap closed for
snapshots: node metrics (this machine's CPU and memory right now) are
replaced by fixed figures so that a frame is the same on every run. Every
other call reads the real run folders."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from torchdeck.backends.base import NodeMetrics, ProcessMetrics
from torchdeck.backends.local import LocalBackend
from torchdeck.settings import Settings

RECORDED = Path(__file__).parent / "data" / "recorded-runs"
RECORDED_RUN = "recorded-1122-044521"


class FixedNodesBackend(LocalBackend):
    def node_metrics(self, run_id: str) -> list[NodeMetrics]:
        self.resolve(run_id)
        return [
            NodeMetrics(
                name="node-0",
                cpu_percent=62.0,
                cpu_count=2,
                mem_used_mb=3 * 1024,
                mem_total_mb=24 * 1024,
                gpu_note="no GPU",
                processes=[ProcessMetrics(0, 101, 97.0, 410.0), ProcessMetrics(1, 102, 95.0, 405.0)],
            )
        ]


def recorded_state(tmp_path: Path) -> Path:
    """A state directory holding the recorded run (a real 2-rank run with
    rank 1 killed once and restarted)."""
    state = tmp_path / "state"
    shutil.copytree(RECORDED, state / "runs")
    return state


def settings_for(state: Path, **kw) -> Settings:
    return Settings(state_dir=state, spec_file=state / "torchdeck.yaml", ascii=kw.pop("ascii", False), **kw)


async def wait_for(pilot, condition, timeout: float = 20.0, what: str = "condition") -> None:
    """Let the app run until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def text_of(screen, selector: str) -> str:
    """What a Static shows now."""
    from textual.widgets import Static

    return str(screen.query_one(selector, Static).render())


async def type_into(pilot, screen, field: str, text: str) -> None:
    """Clear the form field ``#f-FIELD`` and type ``text`` into it, key by key."""
    from textual.widgets import Input

    widget = screen.query_one(f"#f-{field}", Input)
    widget.value = ""
    widget.focus()
    await pilot.pause()
    await pilot.press(*text)
    await pilot.pause()
