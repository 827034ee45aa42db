"""What may reach a terminal from text torchdeck did not write: a rank's output, a pod's log, a
failure reason, a string from a manifest or a cluster. One sanitiser, two uses:

- ``as_shown``: the line as a terminal would leave it (escape sequences and control characters
  out, tabs as spaces, only what follows the last carriage return: a progress bar's last state),
  for the console's log pane and for ``torchdeck logs`` on a terminal;
- ``printable``: control characters escaped (``\\r``, ``\\x1b``), for one-line errors, tables and
  notes, where the person must see what was in a name or a message.

Standard library only: the CLI, the console and the monitor all use it."""

from __future__ import annotations

import re

ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.?)", re.DOTALL)
"""A terminal's escape sequences (colours, cursor moves, titles): what a rank's output carries
from tqdm or a coloured logger, and what must not drive the terminal torchdeck draws on."""
_DROPPED = {c: None for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]} | {ord("\t"): "    "}
# C0 and C1 controls and DEL, shown escaped: a carriage return in a field name or an escape
# sequence in a pod's traceback must neither split the one error line nor drive the terminal.
_ESCAPED = {c: repr(chr(c))[1:-1] for c in (*range(0x20), *range(0x7F, 0xA0))}


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
