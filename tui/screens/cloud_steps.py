"""What the storage and image screens share: a form whose fields say what
is wrong with them as they are typed, and a pane that shows a long AWS or
Kubernetes step as it goes (its phase, the time so far, a line per event),
fed by a worker that forwards the backend's Progress events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.screen import Screen
from textual.widgets import Input, RichLog, Select, Static
from textual.worker import Worker, WorkerState

from torchdeck.monitor.state import format_duration

from ..messages import StepProgressed
from .worker_errors import error_text

if TYPE_CHECKING:
    from torchdeck.backends.eks.progress import Progress


class CloudStepsScreen(Screen):
    """A form (``FIELDS``: id, label) and a progress pane (#phase, #progress)."""

    def value(self, field: str) -> str:
        widget = self.query_one(f"#f-{field}")
        if isinstance(widget, Select):
            return "" if widget.value is Select.BLANK else str(widget.value)
        assert isinstance(widget, Input)
        return widget.value.strip()

    def field_error(self, field: str, text: str) -> None:
        for widget in self.query(".field-error").results(Static):
            widget.update("")
            widget.set_class(False, "-shown")
        if field:
            target = self.query_one(f"#e-{field}", Static)
            target.update(text)
            target.set_class(True, "-shown")

    def check_form(self) -> Any:
        """The form's plan, or None with the first bad field's reason shown under it."""

    def on_input_changed(self, event: Input.Changed) -> None:
        self.check_form()

    def on_select_changed(self, event: Select.Changed) -> None:
        self.check_form()

    def forward(self, group: str, progress: Callable[[], AsyncIterator[Progress]]) -> None:
        """Run ``progress()`` to its end on this (worker) thread, posting each event to the screen."""

        async def run() -> None:
            async for p in progress():
                self.post_message(StepProgressed(p, group))

        asyncio.run(run())

    def start(self, phase: str) -> None:
        self.phase, self.started = phase, time.monotonic()
        self.tick()

    def on_step_progressed(self, message: StepProgressed) -> None:
        p = message.progress
        self.phase = "done" if p.kind == "done" else p.phase
        style = {"output": "", "wait": "dim", "done": "bold green"}.get(p.kind, "bold")
        self.log_line(f"[{format_duration(p.elapsed)}] {p.phase}: {p.message}", style)
        self.tick()
        if p.kind == "done":
            self.finished(message.group, p)

    def finished(self, group: str, progress: Progress) -> None:
        """A step ran to its end (its last, done, event)."""

    def tick(self) -> None:
        if not getattr(self, "phase", ""):
            return
        running = self.phase != "done" and not self.phase.startswith("stopped")
        elapsed = f"  {format_duration(time.monotonic() - self.started)} elapsed" if running else ""
        self.query_one("#phase", Static).update(Text.assemble((self.phase, "reverse"), elapsed))

    def log_line(self, text: str, style: str = "") -> None:
        self.query_one("#progress", RichLog).write(Text(text, style=style))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR:
            text = error_text(event.worker.error)
            self.phase = f"stopped in {getattr(self, 'phase', '') or event.worker.group}"
            self.tick()
            self.log_line(f"{event.worker.group} failed: {text}", "bold red")
            self.notify(text, title=f"{event.worker.group} failed", severity="error", timeout=8)
