"""Following a run's metric stream in a child process.

Reading, parsing and folding tens of thousands of metric lines a second is
pure Python; done on a thread of the console, it holds the GIL so much that
every hop of the event loop waits for it and frames arrive late. So a child
process follows ``Backend.metrics`` into a ``MonitorState`` and sends the
console a ``MonitorSnapshot`` at the frame rate; the console only unpickles
one snapshot per frame. Every backend is picklable for this (see
``Backend``). The child ends when the stream does, when the console closes
the feed, or when the console is gone (its next send fails)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection

from torchdeck.backends.base import Backend, LogLine
from torchdeck.backends.errors import BackendError

from .state import MonitorSnapshot, MonitorState


@dataclass
class FeedUpdate:
    """A snapshot, and the log lines that came since the last one (where
    the backend's logs carry its metrics, see ``Backend.logs_carry_metrics``)."""

    snapshot: MonitorSnapshot
    lines: list[LogLine]


RANKS_AT_FULL_RATE = 256
"""A snapshot carries every rank's row: for more ranks than this, snapshots are sent less often in
proportion (0.4 s apart at 1,024 ranks for a period of 0.1 s), for the reader to make and the
console to read; the screen draws its table four times a second and its chart twice anyway."""
MAX_LINES_PER_UPDATE = 5000
"""Log lines sent with one update at most; the log pane keeps 20,000."""


@dataclass
class FeedFailed:
    """The child's stream ended with an error (sent in place of a snapshot)."""

    message: str
    hint: str = ""


def _read_picks(choice: dict) -> None:
    """The child's stdin after its arguments: the ranks the console asks the chart for, a pickled
    list at a time (empty: the automatic choice). Ends with the console."""
    try:
        while True:
            choice["pick"] = [int(r) for r in pickle.load(sys.stdin.buffer)]
            choice["changed"] = True
    except (EOFError, OSError, ValueError, TypeError, pickle.UnpicklingError):
        return


def _follow(
    backend: Backend,
    run_id: str,
    straggler_ratio: float,
    curve_ranks: int,
    period_s: float,
    conn: Connection,
    choice: dict | None = None,
) -> None:
    """The child: fold the stream in, send a snapshot every period when
    something changed (and once a second regardless, for the clocks and the
    silence flags), and a last one when the stream ends. ``choice["pick"]``
    names the ranks whose curves to send (set by ``_read_picks``)."""
    choice = {} if choice is None else choice
    state = MonitorState(straggler_ratio=straggler_ratio)
    lines: deque[LogLine] = deque(maxlen=MAX_LINES_PER_UPDATE)

    async def consume() -> None:
        async for events, new_lines in backend.follow(run_id):
            state.ingest(events)
            lines.extend(new_lines)
            await asyncio.sleep(0)  # the sender's turn, when it is due

    async def pump() -> None:
        task = asyncio.ensure_future(consume())
        sent_events, sent_at = -1, 0.0
        while True:
            await asyncio.wait({task}, timeout=period_s * max(1.0, len(state.ranks) / RANKS_AT_FULL_RATE))
            now = time.monotonic()
            changed, choice["changed"] = choice.get("changed", False), False
            if task.done() or state.events != sent_events or lines or changed or now - sent_at >= 1.0:
                conn.send(FeedUpdate(state.snapshot(curve_ranks, pick=choice.get("pick")), list(lines)))
                lines.clear()
                sent_events, sent_at = state.events, now
            if task.done():
                error = task.exception()
                if error is not None:
                    conn.send(
                        FeedFailed(
                            getattr(error, "message", None) or str(error) or type(error).__name__,
                            getattr(error, "hint", ""),
                        )
                    )
                return

    try:
        asyncio.run(pump())
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        pass  # the console has gone, or closed the feed
    finally:
        conn.close()


class MetricFeed:
    """Snapshots of one run's metrics, made by a child process.

    A plain ``python -m`` child rather than multiprocessing: the arguments go
    down its stdin as one pickle and the snapshots come back over a pipe of
    their own, so nothing depends on what the console has done to
    ``sys.stderr`` or ``__main__`` (Textual replaces the one, pytest owns
    the other)."""

    def __init__(
        self, backend: Backend, run_id: str, straggler_ratio: float = 0.75, curve_ranks: int = 8, period_s: float = 0.05
    ):
        read_fd, write_fd = os.pipe()
        self._stderr = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", __name__, str(write_fd)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                pass_fds=(write_fd,),
            )
        except OSError as exc:
            os.close(read_fd)
            raise BackendError(f"cannot start the metric reader: {exc}", "check that Python can run here") from exc
        finally:
            os.close(write_fd)
        self._conn = Connection(read_fd, writable=False)
        self._lines: list[LogLine] = []
        assert self._proc.stdin is not None
        self._stdin = self._proc.stdin  # kept open: the chart's rank choice goes down it (``pick``)
        # The console's import path first, as multiprocessing does: the
        # backend's class may live anywhere the console could import it.
        pickle.dump(sys.path, self._stdin)
        pickle.dump((backend, run_id, straggler_ratio, curve_ranks, period_s), self._stdin)
        self._stdin.flush()

    def pick(self, ranks: list[int]) -> None:
        """Chart these ranks from the next snapshot on ([]: the automatic choice again)."""
        try:
            pickle.dump(list(ranks), self._stdin)
            self._stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the reader has ended: there is no chart to change

    def snapshots(self, wait_s: float = 0.25) -> Iterator[MonitorSnapshot | None]:
        """The newest snapshot each time one or more arrive (older ones
        queued behind it are skipped), or None after ``wait_s`` without one,
        so the caller can stop between. Ends with the stream; raises
        BackendError if the stream failed."""
        while True:
            if not self._conn.poll(wait_s):
                yield None
                continue
            newest = None
            try:
                while True:
                    item = self._conn.recv()
                    if isinstance(item, FeedFailed):
                        raise BackendError(item.message, item.hint)
                    newest = item.snapshot
                    self._lines.extend(item.lines)
                    if not self._conn.poll(0):
                        break
            except EOFError:
                if newest is not None:
                    yield newest
                self._check_exit()
                return
            yield newest

    def take_lines(self) -> list[LogLine]:
        """The log lines that came with the snapshots so far (call from the reading thread)."""
        lines, self._lines = self._lines, []
        return lines

    def _check_exit(self) -> None:
        """The stream ended: fine if the child did, an error if it crashed."""
        code = self._proc.wait(5)
        if code:
            self._stderr.seek(0)
            lines = self._stderr.read().decode(errors="replace").strip().splitlines()
            raise BackendError(
                f"the metric reader stopped (exit {code}): {lines[-1] if lines else 'no message'}",
                "the logs pane still shows the run; reopen the monitor to retry",
            )

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._stdin.close()
        self._conn.close()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()

    def __enter__(self) -> MetricFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str]) -> int:
    sys.path[:] = pickle.load(sys.stdin.buffer)
    backend, run_id, straggler_ratio, curve_ranks, period_s = pickle.load(sys.stdin.buffer)
    choice: dict = {}
    threading.Thread(target=_read_picks, args=(choice,), name="picks", daemon=True).start()
    _follow(backend, run_id, straggler_ratio, curve_ranks, period_s, Connection(int(argv[0]), readable=False), choice)
    # Leave at once: the pick reader may be inside stdin's buffered read, and a normal
    # interpreter exit aborts on that lock ("could not acquire lock ... at interpreter shutdown").
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    # The module's own name, not __main__, so what the child pickles
    # (FeedFailed) unpickles in the console.
    from torchdeck.monitor.feed import main as _main

    sys.exit(_main(sys.argv[1:]))
