"""The one place where a failed worker becomes words on the screen: a
backend's own error as its message and hint, anything else as its type and
message, never a traceback."""

from __future__ import annotations

from textual.worker import Worker, WorkerState

from torchdeck.backends.errors import BackendError


def error_text(error: BaseException | None) -> str:
    return str(error) if isinstance(error, BackendError) else f"{type(error).__name__}: {error}"


class NotifyWorkerErrors:
    """Screen mix-in: a worker that fails shows up as an error notification."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR:
            self.notify(
                error_text(event.worker.error), title=f"{event.worker.group} failed", severity="error", timeout=8
            )
