"""A yes/no question over the current screen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

if TYPE_CHECKING:
    from torchdeck.backends.base import JobStatus


def by_label(status: JobStatus | None) -> str:
    """What a question about a run found by its label alone adds: torchdeck did not record making it."""
    if status is None or not status.found_by_label:
        return ""
    return (
        f"\n\n{status.run_id} ({status.location}) was found by its label only: torchdeck has no record of "
        "making it here. Say yes only if it is yours."
    )


class ConfirmScreen(ModalScreen[bool]):
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 60; height: auto; border: thick $warning; background: $surface; padding: 1 2; }
    ConfirmScreen Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    ConfirmScreen Button { margin-left: 2; }
    ConfirmScreen Label { width: 1fr; }
    """
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(self.question))  # as written: a run's names and paths are no markup
            with Horizontal():
                yield Button("No (n)", id="no")
                yield Button("Yes (y)", id="yes", variant="error")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class AskScreen(ModalScreen[str | None]):
    """A line of text asked over the current screen (the runs filter): enter gives it, escape
    gives None (nothing changes)."""

    DEFAULT_CSS = """
    AskScreen { align: center middle; }
    AskScreen > Vertical { width: 70; height: auto; border: thick $primary; background: $surface; padding: 1 2; }
    AskScreen Label { width: 1fr; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, value: str = ""):
        super().__init__()
        self.question = question
        self.value = value

    def compose(self) -> ComposeResult:
        from textual.widgets import Input

        with Vertical():
            yield Label(Text(self.question))
            yield Input(self.value, id="ask-answer")

    def on_input_submitted(self, event: object) -> None:
        from textual.widgets import Input

        self.dismiss(self.query_one("#ask-answer", Input).value)

    def action_cancel(self) -> None:
        self.dismiss(None)
