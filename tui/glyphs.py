"""How the console looks: the characters it draws with (Unicode by
default, ASCII where the terminal cannot show more: ``--ascii``,
TORCHDECK_ASCII=1, or a non-UTF-8 locale) and the colour of each job state."""

from __future__ import annotations

from dataclasses import dataclass

from torchdeck.backends.states import JobState

STATE_STYLE = {
    JobState.PENDING: "yellow",
    JobState.QUEUED: "blue",
    JobState.RUNNING: "bold green",
    JobState.SUCCEEDED: "bold cyan",
    JobState.FAILED: "bold red",
    JobState.CANCELLED: "magenta",
    JobState.UNKNOWN: "dim",
}


@dataclass(frozen=True)
class Glyphs:
    bar_full: str
    bar_empty: str
    bar_left: str
    bar_right: str
    plot_marker: str
    bad: str
    warn: str


UNICODE = Glyphs(bar_full="█", bar_empty="░", bar_left="▕", bar_right="▏", plot_marker="braille", bad="✗", warn="!")
ASCII = Glyphs(bar_full="#", bar_empty=".", bar_left="[", bar_right="]", plot_marker="*", bad="x", warn="!")


def glyphs_for(ascii_only: bool) -> Glyphs:
    return ASCII if ascii_only else UNICODE


def bar(fraction: float, width: int, g: Glyphs) -> str:
    """A fixed-width gauge such as ▕████░░░░▏ or [####....]."""
    fraction = min(1.0, max(0.0, fraction))
    filled = int(round(fraction * width))
    return g.bar_left + g.bar_full * filled + g.bar_empty * (width - filled) + g.bar_right
