"""Output rewritten in place: a progress bar redraws one line with ``\\r`` (and colour or cursor
codes) and ends it only when its epoch ends. ``Rewrites`` turns a rank's output, as it arrives,
into the lines torchdeck reads, a bar's newest state at most every half second and its last
always; ``updates_in`` spreads a whole line of updates (a pod log's, which arrives at the bar's
end) into the states worth reading. Standard library only."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

ANSI_RE = re.compile(r"\x1b(?:\[[0-9;?]{0,32}[ -/]{0,4}[@-~]|\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)|[@-Z\\-_])")
"""Colour and cursor codes (rich's and tqdm's bars move the cursor): dropped before reading."""
UPDATES_KEPT = 20
"""Updates of a rewritten line read where they arrive together (a bar's epoch, on a cluster): that
many spread over them, and the last."""


def updates_in(line: str) -> list[str]:
    """The states of a line rewritten in place with ``\r``, in order, colour codes dropped: all of them
    where few, else ``UPDATES_KEPT`` spread over them and the last."""
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
    if "\r" not in line:
        return [line]
    parts = [part for part in line.split("\r") if part.strip()]
    if len(parts) <= UPDATES_KEPT + 1:
        return parts
    stride = len(parts) / UPDATES_KEPT
    return [parts[int(i * stride)] for i in range(UPDATES_KEPT)] + [parts[-1]]


class Rewrites:
    """A rank's raw output, as it arrives, to the lines torchdeck reads: a line ends at a newline; a
    line rewritten in place with ``\\r`` (a progress bar) is read as it updates, its newest state at
    most every ``every_s`` seconds (a bar refreshing 10 times a second costs one parse in five), and
    its last state always. Bytes only: the caller passes the output through unchanged."""

    SEP = re.compile(rb"[\r\n]")

    def __init__(self, every_s: float = 0.5, clock: Callable[[], float] = time.monotonic, max_line: int = 1 << 20):
        self.every_s, self.clock, self.max_line = every_s, clock, max_line
        self.buffer = b""
        self.pending: bytes | None = None
        """The newest complete state of the line being rewritten, not read yet."""
        self.in_place = False
        self.shown = b""
        self.last_read = float("-inf")

    def feed(self, data: bytes) -> list[str]:
        """The lines and updates ``data`` completes (with what came before it)."""
        self.buffer += data
        out: list[str] = []
        start = 0
        while (m := self.SEP.search(self.buffer, start)) is not None:
            i = m.start()
            if self.buffer[i : i + 1] == b"\r" and i + 1 == len(self.buffer):
                break  # a CR last in the chunk may be the first half of a CRLF
            segment = self.buffer[start:i]
            newline = self.buffer[i : i + 1] == b"\n" or self.buffer[i + 1 : i + 2] == b"\n"
            start = i + (2 if self.buffer[i : i + 2] == b"\r\n" else 1)
            if newline:
                if segment.strip():
                    out.append(segment.decode(errors="replace"))
                self.pending, self.in_place, self.shown = None, False, b""
            else:
                if segment.strip():
                    self.pending = segment
                self.in_place = True
        self.buffer = self.buffer[start:]
        if len(self.buffer) > self.max_line:  # no end in sight: read it as it is
            out.append(self.buffer.decode(errors="replace"))
            self.buffer = b""
        out += self.idle()
        return out

    def idle(self) -> list[str]:
        """The newest state of a line being rewritten, where it changed and the throttle allows."""
        if not self.in_place or self.clock() - self.last_read < self.every_s:
            return []
        newest = self.buffer if self.buffer.strip() else self.pending
        self.pending = None
        if not newest or newest == self.shown:
            return []
        self.shown, self.last_read = newest, self.clock()
        return [newest.decode(errors="replace")]

    def close(self) -> list[str]:
        """What is left when the output ends."""
        rest = self.buffer if self.buffer.strip() else self.pending
        self.buffer, self.pending = b"", None
        return [rest.decode(errors="replace")] if rest and rest != self.shown else []
