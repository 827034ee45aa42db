"""What may reach a terminal from text torchdeck did not write: a rank's output, a pod's log, a
failure reason, a string from a manifest or a cluster. One sanitiser, two uses:

- ``as_shown``: the line as a terminal would leave it (escape sequences and control characters
  out, tabs as spaces, only what follows the last carriage return: a progress bar's last state),
  for the console's log pane and for ``torchdeck logs`` on a terminal;
- ``printable``: control characters escaped (``\\r``, ``\\x1b``), and the invisible ones that
  reorder or hide text (bidi overrides, zero-width spaces: ``\\u202e``), for one-line errors,
  tables and notes, where the person must see what was in a name or a message;
- ``guarded``: a headless command's stdout and stderr on a terminal, through which every line it
  prints passes ``printable`` but for its newlines (a cluster's event, a node's reason, a ledger's
  name, a rank's failure: any of them may carry an escape sequence). torchdeck's own redraw of a
  progress block writes to the terminal beneath (``EscapingWriter.terminal``).

Standard library only: the CLI, the console and the monitor all use it."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import TextIO

ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.?)", re.DOTALL)
"""A terminal's escape sequences (colours, cursor moves, titles): what a rank's output carries
from tqdm or a coloured logger, and what must not drive the terminal torchdeck draws on."""
INVISIBLE = (
    *range(0x200B, 0x2010),  # zero-width space, non-joiner, joiner; left-to-right and right-to-left marks
    *range(0x202A, 0x202F),  # bidi embeddings and overrides (U+202E reads a line backwards)
    *range(0x2060, 0x2065),  # word joiner and invisible operators
    *range(0x2066, 0x206A),  # bidi isolates
    0x061C,  # Arabic letter mark
    0xFEFF,  # zero-width no-break space (a byte-order mark)
)
"""Characters that change how a line reads, or hide, without showing themselves: on a bidi terminal
a reason could read the opposite of what it says. Shown escaped (``\\u202e``) wherever text
torchdeck did not write reaches a terminal."""
_SHOWN_INVISIBLE = {c: f"\\u{c:04x}" for c in INVISIBLE}
_DROPPED = {c: None for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]} | {ord("\t"): "    "} | _SHOWN_INVISIBLE
# C0 and C1 controls and DEL, shown escaped: a carriage return in a field name or an escape
# sequence in a pod's traceback must neither split the one error line nor drive the terminal.
_ESCAPED = {c: repr(chr(c))[1:-1] for c in (*range(0x20), *range(0x7F, 0xA0))} | _SHOWN_INVISIBLE


def as_shown(text: str) -> str:
    """``text`` as a terminal would leave it, with nothing in it that drives the terminal."""
    if "\r" in text:
        text = text.rstrip("\r").rsplit("\r", 1)[-1]
    if "\x1b" in text:
        text = ESCAPES.sub("", text)
    return text.translate(_DROPPED)


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\r``, ``\\x1b``), for one line on a terminal."""
    return text.translate(_ESCAPED)


_ESCAPED_LINES = {c: v for c, v in _ESCAPED.items() if c != ord("\n")}


def printable_lines(text: str) -> str:
    """``text`` with every control character but the newline escaped: several lines on a terminal."""
    return text.translate(_ESCAPED_LINES)


class EscapingWriter:
    """A text stream that writes to ``terminal`` with every control character but the newline
    escaped; anything else (flush, isatty, fileno) is the terminal's."""

    def __init__(self, terminal: TextIO):
        self.terminal = terminal

    def write(self, text: str) -> int:
        self.terminal.write(printable_lines(text))
        return len(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self.terminal, name)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """stdout and stderr escaped while a headless command runs, where they are terminals (a pipe
    or a file gets the bytes as they are: JSON, logs for another program)."""
    saved = sys.stdout, sys.stderr
    try:
        if sys.stdout.isatty():
            sys.stdout = EscapingWriter(sys.stdout)
        if sys.stderr.isatty():
            sys.stderr = EscapingWriter(sys.stderr)
        yield
    finally:
        sys.stdout, sys.stderr = saved
