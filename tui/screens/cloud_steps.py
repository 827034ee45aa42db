"""What the cloud screens (cluster wizard, storage, image) share: one
layout (a form on the left, a side pane and the progress pane on the
right, a line for errors the form cannot place), fields that say what is
wrong with them as they are typed, and a pane that shows a long AWS or
Kubernetes step as it goes (its phase, the time so far, a line per event),
fed by a worker that forwards the backend's Progress events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult, CSSPathType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Input, Label, RichLog, Select, Static

from torchdeck.backends.errors import SpecError
from torchdeck.monitor.state import format_duration

from ..messages import StepProgressed
from .base import DeckScreen

if TYPE_CHECKING:
    from torchdeck.backends.eks.progress import Progress

STYLES = {"event": "cyan", "output": "", "wait": "dim", "done": "bold green"}


class CloudStepsScreen(DeckScreen[None]):
    """A form (``FIELDS``: id, label; an Input each unless ``field_widgets``
    gives another), a side pane (``side``), and the progress pane
    (#phase, #progress)."""

    CSS_PATH: ClassVar[CSSPathType | None] = "cloud.tcss"
    FIELDS: ClassVar[list[tuple[str, str]]] = []
    TITLE_TEXT: ClassVar[str] = ""

    step = ""  # what runs (create, delete, build...), and where it is (its phase)
    phase = ""
    started = 0.0

    def compose(self) -> ComposeResult:
        yield Static(self.TITLE_TEXT, id="cloud-title")
        with Horizontal(id="cloud-body"):
            with VerticalScroll(id="cloud-form"):
                widgets = self.field_widgets()
                for field, label in self.FIELDS:
                    yield Label(label)
                    yield widgets.get(field) or Input(id=f"f-{field}")
                    yield Static(id=f"e-{field}", classes="field-error")
            with Vertical(id="cloud-side"):
                yield from self.side()
                yield Static(id="phase")
                yield RichLog(id="progress", max_lines=1000, wrap=True)
        yield Static(id="form-error")
        yield self.app.footer()

    def on_mount(self) -> None:  # Textual runs this after the screen's own on_mount
        self.set_interval(1.0, self.tick)

    def field_widgets(self) -> dict[str, Widget]:
        """The fields that are not a plain Input (a Select, a digits-only Input), by field id."""
        return {}

    def side(self) -> ComposeResult:
        """What the side pane shows above the progress."""
        yield from ()

    # -- the form ---------------------------------------------------------------------

    def value(self, field: str) -> str:
        widget = self.query_one(f"#f-{field}")
        if isinstance(widget, Select):
            return "" if widget.value is Select.BLANK else str(widget.value)
        assert isinstance(widget, Input)
        return widget.value.strip()

    def set_value(self, field: str, value: str) -> None:
        widget = self.query_one(f"#f-{field}")
        assert isinstance(widget, Input | Select)
        widget.value = value

    def field_error(self, field: str, text: str) -> None:
        """Show ``text`` under ``field`` (or, for a field the form does not have, under the form)
        and clear every other error; ``field_error("", "")`` clears them all."""
        for widget in self.query(".field-error").results(Static):
            widget.update("")
            widget.set_class(False, "-shown")
        if field in dict(self.FIELDS):
            target = self.query_one(f"#e-{field}", Static)
            target.update(text)
            target.set_class(True, "-shown")
            text = ""
        self.form_error(text)

    def spec_error(self, exc: SpecError, field: str) -> None:
        """``exc`` under ``field``: its reason and hint (the field goes without saying)."""
        if field in dict(self.FIELDS):
            self.field_error(field, exc.reason + (f" (hint: {exc.hint})" if exc.hint else ""))
        else:
            self.field_error("", str(exc))

    def form_error(self, text: str) -> None:
        """A line under the form for what no field owns (a file that cannot be read or written)."""
        self.query_one("#form-error", Static).update(text)
        self.query_one("#form-error").set_class(bool(text), "-shown")

    def check_form(self) -> Any:
        """The form's plan, or None with the first bad field's reason shown under it."""

    def on_input_changed(self, event: Input.Changed) -> None:
        self.check_form()

    def on_select_changed(self, event: Select.Changed) -> None:
        self.check_form()

    # -- the progress pane -------------------------------------------------------------

    def forward(self, group: str, progress: Callable[[], AsyncIterator[Progress]]) -> None:
        """Run ``progress()`` to its end on this (worker) thread, posting each event to the screen."""

        async def run() -> None:
            async for p in progress():
                self.post_message(StepProgressed(p, group))

        asyncio.run(run())

    def start(self, step: str) -> None:
        self.step, self.phase, self.started = step, "starting", time.monotonic()
        self.tick()

    def on_step_progressed(self, message: StepProgressed) -> None:
        p = message.progress
        self.phase = "done" if p.kind == "done" else p.phase
        self.log_line(f"[{format_duration(p.elapsed)}] {p.phase}: {p.message}", STYLES.get(p.kind, "bold"))
        self.tick()
        if p.kind == "done":
            self.finished(message.group, p)

    def finished(self, group: str, progress: Progress) -> None:
        """A step ran to its end (its last, done, event)."""

    def running(self) -> bool:
        return bool(self.phase) and self.phase != "done" and not self.phase.startswith("stopped")

    def tick(self) -> None:
        if not self.phase:
            return
        elapsed = f"  {format_duration(time.monotonic() - self.started)} elapsed" if self.running() else ""
        self.query_one("#phase", Static).update(
            Text.assemble((f"{self.step}: ", "bold"), (self.phase, "reverse"), elapsed)
        )

    def log_line(self, text: str, style: str = "") -> None:
        self.query_one("#progress", RichLog).write(Text(text, style=style))

    def worker_failed(self, group: str, text: str) -> None:
        if self.running():
            self.phase = f"stopped in {self.phase}"
            self.tick()
        self.log_line(f"{group} failed: {text}", "bold red")
        super().worker_failed(group, text)
