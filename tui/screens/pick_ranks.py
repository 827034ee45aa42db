"""Which ranks the loss chart draws: a one-line question over the monitor."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from torchdeck.monitor.state import CHART_RANKS, parse_ranks


class PickRanksScreen(ModalScreen[list[int] | None]):
    """Answers the ranks typed (``0,8,16-23``; empty: the automatic choice), or None on escape.
    A typo is said under the field, and the field keeps what was typed."""

    DEFAULT_CSS = """
    PickRanksScreen { align: center middle; }
    PickRanksScreen > Vertical { width: 64; height: auto; border: round $primary; background: $surface; padding: 0 1; }
    PickRanksScreen Label { width: 1fr; }
    PickRanksScreen Input { background: $panel; margin: 1 0 0 0; }
    PickRanksScreen Input:focus { background: $primary 30%; }
    PickRanksScreen #pick-error { color: $error; height: auto; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: list[int]):
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Ranks to chart, at most {CHART_RANKS} (empty: flagged ranks first, then the lowest)")
            yield Input(",".join(map(str, self.current)), placeholder="0,8,16-21", id="pick", compact=True)
            yield Label("", id="pick-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            self.dismiss(parse_ranks(event.value))
        except ValueError as exc:
            self.query_one("#pick-error", Label).update(str(exc))

    def action_cancel(self) -> None:
        self.dismiss(None)
