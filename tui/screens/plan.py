"""The launch form's preview: the plan a launch applies (``Backend.plan``), as ``train --dry-run``
prints it; launching from here submits exactly that plan."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from torchdeck.backends.base import Plan
from torchdeck.terminal import printable_lines


class PlanScreen(ModalScreen[bool]):
    """The plan, and whether to launch it (True) or go back to the form (False)."""

    CSS_PATH = "plan.tcss"
    BINDINGS = [
        Binding("ctrl+l", "answer(True)", "Launch this plan", priority=True),
        Binding("escape", "answer(False)", "Back to the form"),
        Binding("f", "whole", "Every object whole"),
    ]

    def __init__(self, plan: Plan):
        super().__init__()
        self.plan = plan
        self.whole = False
        """Every object written out (a code bundle's ConfigMap too), or the plan as a person reads it."""

    def compose(self) -> ComposeResult:
        blocked = f" - {len(self.plan.findings)} finding(s) stop it" if self.plan.findings else ""
        with Vertical(id="plan-box"):
            yield Static(f"Plan: run {self.plan.run_id} on the {self.plan.backend} backend{blocked}", id="plan-title")
            with VerticalScroll(id="plan-body"):
                yield Static(Text(printable_lines(self.plan.text())), id="plan-text")
            with Horizontal(id="plan-buttons"):
                yield Button("Launch ^l", id="go", variant="success", compact=True, disabled=bool(self.plan.findings))
                yield Button("Back esc", id="back", compact=True)

    def action_whole(self) -> None:
        """``f``: the objects whole (as ``--output yaml`` prints them), and back."""
        self.whole = not self.whole
        self.query_one("#plan-text", Static).update(Text(printable_lines(self.plan.text(full=self.whole))))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "go")

    def action_answer(self, launch: bool) -> None:
        self.dismiss(launch and not self.plan.findings)
