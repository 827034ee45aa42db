"""What every headless command shares: a line to stderr (``say``, ``fail``), one yes/no
question (``ask``) and a confirmation that never blocks a pipe (``confirm``), and a long step's
progress printed one line per event (phase, elapsed time, what happened), which reads the same on
a laptop, over SSH and in a CI log."""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, TypeAlias

from torchdeck.backends.errors import BackendError
from torchdeck.terminal import printable

EXIT_ERROR = 1
EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_ERROR) -> int:
    """One line to stderr, the error's words made safe for the terminal; the exit code."""
    print(f"torchdeck: error: {printable(message)}", file=sys.stderr)
    return code


Commands: TypeAlias = "argparse._SubParsersAction[CommandParser]"
"""The ``torchdeck`` parser's sub-commands, as each command module adds its own to them."""

if TYPE_CHECKING:
    from torchdeck.backends.eks.progress import Progress

    from .main import CommandParser


def say(line: str) -> None:
    """A line for the person at the terminal (stderr: stdout stays the command's output). Escaped,
    as one line: what it says often comes from a pod, a node or a cluster (a waiting reason, an
    event), and an escape sequence there would drive the terminal (retitle it, clear it, hide
    what follows) or a line break forge a line of torchdeck's own."""
    print(f"torchdeck: {printable(line)}", file=sys.stderr)


def ask(question: str) -> bool:
    """A yes/no question on the terminal; no terminal (a pipe, CI) answers no. The question is
    written through the escaping (it may name a node or a run a cluster gave), never as
    ``input``'s prompt, which readline writes to the terminal itself. The one prompt of the CLI."""
    if not sys.stdin.isatty():
        print(printable(f"{question}no (not a terminal: --yes answers yes)"), file=sys.stderr)
        return False
    sys.stderr.write(printable(question))
    sys.stderr.flush()
    try:
        return input().strip().lower() in ("y", "yes")
    except EOFError:
        return False


def confirm(question: str, yes: bool) -> None:
    """Ask before a step that costs or deletes (``ask``); without a terminal, refuse unless
    ``--yes`` (a pipe never hangs on a prompt, nor goes ahead unasked)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise BackendError(f"{question} needs a confirmation", "pass --yes to go ahead without a prompt")
    if not ask(f"{question} [y/N] "):
        raise BackendError("cancelled; nothing was changed")


def progress_line(p: Progress) -> str:
    from torchdeck.monitor.state import format_duration

    mark = {"event": "cfn ", "output": "  | ", "wait": " ...", "done": "done"}.get(p.kind, "    ")
    return f"[{format_duration(p.elapsed):>6}] {p.phase:<11} {mark} {p.message}"


def stream(progress: AsyncIterator[Progress]) -> Progress | None:
    """Print each progress event as it comes, and return the last (its ``result`` is what the step
    made); Ctrl-C stops here (create and delete resume on a re-run)."""
    import asyncio

    async def run() -> Progress | None:
        last = None
        async for p in progress:
            print(progress_line(p), flush=True)
            last = p
        return last

    try:
        return asyncio.run(run())
    except KeyboardInterrupt:
        say("interrupted: what is made is recorded; run the same command again to continue")
        raise
