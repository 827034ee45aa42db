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
from typing import TYPE_CHECKING, ClassVar, Generic, Literal, TypeVar

from rich.text import Text
from textual.app import ComposeResult, CSSPathType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Input, RichLog, Select, Static

from torchdeck.backends.errors import SpecError
from torchdeck.monitor.state import format_duration

from ..messages import StepProgressed
from .form import FormScreen, field_rows, reason_text

if TYPE_CHECKING:
    from torchdeck.backends.eks.progress import Progress

STYLES = {"event": "cyan", "output": "", "wait": "dim", "done": "bold green"}


StepState = Literal["idle", "running", "done", "stopped"]


PlanT = TypeVar("PlanT")
"""What a screen's form makes: a cluster, storage or image plan."""


class CloudStepsScreen(FormScreen[None], Generic[PlanT]):
    """A form (``FORM``; an Input a field unless ``field_widgets`` gives another), a side pane
    (``side``), and the progress pane (#phase, #progress). Under 100 columns the side pane is behind
    f2 (``action_side``; the title says what it holds, ``SIDE_NAME``): the form takes the width."""

    CSS_PATH: ClassVar[CSSPathType | None] = "cloud.tcss"
    TITLE_TEXT: ClassVar[str] = ""
    SIDE_NAME: ClassVar[str] = "summary and progress"
    """What the side pane holds, in the title's hint at 80 columns."""

    step = ""  # what runs (create, delete, build...), and where it is (its phase, shown as it is)
    phase = ""
    state: StepState = "idle"
    """Whether a step runs: decided by the events, never read back from the phase's words."""
    started = 0.0

    def compose(self) -> ComposeResult:
        yield Static(id="cloud-title")
        with Horizontal(id="cloud-body"):
            with Vertical(id="cloud-left"):
                with VerticalScroll(id="cloud-form", classes="form"):
                    yield from field_rows(self.FORM, self.field_widgets())
                yield Static(id="field-help")
            with Vertical(id="cloud-side"):
                yield from self.side()
                yield Static(id="phase")
                yield RichLog(id="progress", max_lines=1000, wrap=True)
        yield Static(id="form-error")
        yield self.app.footer()

    def title_text(self) -> str:
        """The title line (at 80 columns, with where the side pane is)."""
        return self.TITLE_TEXT

    def show_title(self) -> None:
        narrow = self.has_class("-narrow")
        side = self.has_class("-side")
        hint = ("  f2: the form" if side else f"  f2: {self.SIDE_NAME}") if narrow else ""
        self.query_one("#cloud-title", Static).update(Text.assemble(self.title_text(), (hint, "dim")))

    def on_resize(self) -> None:
        self.call_after_refresh(self.show_title)
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "side":
            return self.has_class("-narrow")  # where both show, the key is not needed (nor shown)
        return True

    def action_side(self) -> None:
        """At 80 columns: the side pane in place of the form, or the form again."""
        self.toggle_class("-side")
        self.show_title()
        if not self.has_class("-side"):
            focused = self.focused
            if focused is None or self._field_of(focused) is None:
                self.query_one(f"#f-{self.FORM[0].id}").focus()

    def on_mount(self) -> None:  # Textual runs this after the screen's own on_mount
        self.set_interval(1.0, self.tick)
        self.show_title()

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
        if field in self.form_ids():
            self.show_errors({field: text})
            text = ""
        else:
            self.show_errors({})
        self.form_error(text)

    def spec_error(self, exc: SpecError, field: str) -> None:
        """``exc`` under ``field``: its reason and hint (the field goes without saying)."""
        if field in self.form_ids():
            self.field_error(field, reason_text(exc))
        else:
            self.field_error("", str(exc))

    def check_form(self) -> PlanT | None:
        """The form's plan, or None with the first bad field's reason shown under it."""
        raise NotImplementedError

    def on_input_changed(self, event: Input.Changed) -> None:
        self.typed(event.input)
        self.check_form()

    def on_select_changed(self, event: Select.Changed) -> None:
        self.typed(event.select)
        self.check_form()

    def submit_form(self) -> PlanT | None:
        """``check_form`` for a key that acts on the form: every field's error shows from now on."""
        self.try_submit()
        return self.check_form()

    # -- the progress pane -------------------------------------------------------------

    def forward(self, group: str, progress: Callable[[], AsyncIterator[Progress]]) -> None:
        """Run ``progress()`` to its end on this (worker) thread, posting each event to the screen."""

        async def run() -> None:
            async for p in progress():
                self.post_message(StepProgressed(p, group))

        asyncio.run(run())

    def start(self, step: str) -> None:
        self.step, self.phase, self.state, self.started = step, "starting", "running", time.monotonic()
        if self.has_class("-narrow") and not self.has_class("-side"):
            self.action_side()  # at 80 columns the progress is behind f2: show it
        self.tick()

    def on_step_progressed(self, message: StepProgressed) -> None:
        p = message.progress
        self.phase = "done" if p.kind == "done" else p.phase
        self.state = "done" if p.kind == "done" else self.state
        self.log_line(f"[{format_duration(p.elapsed)}] {p.phase}: {p.message}", STYLES.get(p.kind, "bold"))
        self.tick()
        if p.kind == "done":
            self.finished(message.group, p)

    def finished(self, group: str, progress: Progress) -> None:
        """A step ran to its end (its last, done, event)."""

    def running(self) -> bool:
        return self.state == "running"

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
            self.phase, self.state = f"stopped in {self.phase}", "stopped"
            self.tick()
        self.log_line(f"{group} failed: {text}", "bold red")
        super().worker_failed(group, text)
