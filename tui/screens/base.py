"""What every screen shares: the console's own app, typed (its settings,
backend, cloud and glyphs), and the one place where a failed worker becomes
words on the screen: a backend's own error as its message and hint,
anything else as its type and message, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from textual.screen import Screen
from textual.worker import Worker, WorkerState

from torchdeck.backends.errors import BackendError

if TYPE_CHECKING:
    from textual import getters

    from ..app import TorchdeckApp

ResultT = TypeVar("ResultT")

PACE = 20.0
"""A screen's repeated read (a run's status, its nodes' figures, the runs listed) comes again no
sooner than this many times the CPU seconds its last one took: on a cluster of 1,000 nodes and 300
jobs, where one read parses megabytes, each keeps within a twentieth of a core on whatever host
the console runs."""


def shown_path(path: str | Path) -> str:
    """A path as a screen shows it: from the working folder where it lies under it, else from
    ``~`` where it lies under the home folder, else whole (an 80-column line has no room for
    /home/someone/projects/... before what matters)."""
    text = str(path)
    if "://" in text:
        return text
    full = Path(text).expanduser()
    if not full.is_absolute():
        return text
    for base, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
        try:
            return prefix + str(full.relative_to(base))
        except ValueError:
            continue
    return text


def error_text(error: BaseException | None) -> str:
    return str(error) if isinstance(error, BackendError) else f"{type(error).__name__}: {error}"


class DeckScreen(Screen[ResultT]):
    """A torchdeck screen. A worker that fails calls ``worker_failed`` (by
    default an error notification); screens override that, never the
    Textual handler, which Textual calls on every class that defines it."""

    if TYPE_CHECKING:  # Textual's own recipe for a typed ``self.app``; at run time the inherited one
        app = getters.app(TorchdeckApp)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR:
            self.worker_failed(event.worker.group, error_text(event.worker.error))

    def worker_failed(self, group: str, text: str) -> None:
        self.notify(text, title=f"{group} failed", severity="error", timeout=8)
