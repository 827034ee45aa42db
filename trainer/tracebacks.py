"""A failed rank's last words, read from its output: a Python traceback's whole message, the line of
the user's code that raised it, whether another attempt would meet it again, and what a script that
asks for CUDA or NCCL where there is none means; and (``FailureWatch``) whether a rank's failure is
a crash loop, to stop torchrun's restarts. Standard library only: it runs in the local rank wrapper
beside the user's code, in the pods' relay, and in the console's log reader."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
from collections.abc import Iterable, Mapping

MODULE_HINT = (
    "install the package in the environment that runs the script (locally), or add it to the code folder's "
    "requirements.txt (entrypoint.requirements) or the image (clusters)"
)


GPU_NEEDED = (
    (re.compile(r"_cuda_|not compiled with CUDA|CUDA support", re.I), "torch here is a CPU build"),
    (re.compile(r"NVIDIA driver|No CUDA GPUs|CUDA driver|cuda.{0,40}(?:not available|unavailable)", re.I),
     "this machine has no GPU"),
    (re.compile(r"NCCL", re.I), "NCCL needs GPUs, and this machine has none"),
)  # fmt: skip
"""What a script that asks for CUDA or NCCL on a machine without them raises, and why, in words."""
GPU_HINT = (
    "run it where there are GPUs (a cluster job with resources.gpus), or let it fall back here: "
    "device = 'cuda' if torch.cuda.is_available() else 'cpu', and init_process_group('gloo') without GPUs"
)
TRANSIENT_RE = re.compile(
    r"Dist(?:Network|Store|Backend)Error|TimeoutError|ConnectionError|Connection reset|BrokenPipe|timed out"
    r"|Socket Timeout|ECONNRESET|out of memory|ChildFailedError|SignalException",
    re.IGNORECASE,
)
"""Errors that another attempt may not meet (the network, the rendezvous, memory): worth a restart."""
AFTERMATH_RE = re.compile(r"^torch\.distributed\.elastic\.\S*(?:ChildFailedError|SignalException)\b")
"""What torchrun's own process raises once a rank failed, or once it was asked to stop: after a rank's
error, only its aftermath (a pod's log holds both, torchrun's unprefixed, as the first rank's)."""
TEARDOWN_ABORT = "terminate called without an active exception"
TRACEBACK_HEAD = "Traceback (most recent call last)"
TRACEBACK_LOOKBACK = 40
"""How many of a rank's last lines are looked through for a traceback: one there means the script
raised, and an abort after it is not the end of finished work."""
TEARDOWN_NOTE = (
    "the script aborted as it exited, after its work was done (PyTorch's gloo threads at interpreter exit): "
    "the rank counts as done"
)
FRAME_RE = re.compile(r'^\s{1,8}File "([^"]{1,500})", line (\d{1,9}), in ')
LIBRARY_PATHS = ("site-packages", "dist-packages", "/lib/python", "<frozen", "<string>")
MAX_MESSAGE = 2000
"""Characters of an exception's message kept (all of a usual one, lines joined)."""


def exception_of(line: str) -> dict[str, str] | None:
    """A Python traceback's last line as an error's message and hint (None: not such a line)."""
    head = line.split(":", 1)[0].strip()
    if not head.endswith(("Error", "Exception", "Interrupt")) or " " in head or line[:1].isspace():
        return None
    message = line.strip()
    for pattern, why in GPU_NEEDED:
        if pattern.search(message):
            return {"message": f"the script needs a GPU ({why}): {message}", "hint": GPU_HINT, "needs": "gpu"}
    if head.rsplit(".", 1)[-1] == "ModuleNotFoundError":
        return {"message": message, "hint": MODULE_HINT}
    return {"message": message, "hint": "the rank's log has the whole traceback"}


def traceback_error(lines: list[str]) -> dict[str, str] | None:
    """The error the last Python traceback among ``lines`` ends in: its whole message (a message of
    several lines joined), the line of the user's code that raised it (the last frame outside the
    installed libraries), and whether another attempt would meet it again (``repeats``). None where
    the lines hold no traceback's end."""
    start = max((i for i, line in enumerate(lines) if line.startswith(TRACEBACK_HEAD)), default=-1)
    where, i = "", start + 1
    while i < len(lines):
        m = FRAME_RE.match(lines[i])
        if m is None:
            if lines[i][:1].isspace() or not lines[i].strip():
                i += 1
                continue
            break
        path, number = m.group(1), m.group(2)
        following = lines[i + 1] if i + 1 < len(lines) else ""
        code = following.strip() if following[:1].isspace() and not FRAME_RE.match(following) else ""
        if not any(part in path for part in LIBRARY_PATHS):
            where = f"{path.rsplit('/', 1)[-1]}:{number}" + (f": {code}" if code else "")
        i += 1
    heads = [j for j in range(max(start, 0), len(lines)) if exception_of(lines[j]) is not None]
    if not heads:
        return None
    first = heads[-1] if start < 0 else heads[0]
    rest = [line.strip() for line in lines[first + 1 :] if line.strip() and not line.startswith(("[", "E1", "W1"))]
    text = " ".join([lines[first].strip(), *rest])[:MAX_MESSAGE]
    error = exception_of(text) or {"message": text, "hint": ""}
    if where:
        error["message"] += f" (at {where})"
    error["repeats"] = "no" if TRANSIENT_RE.search(text) else "yes"
    return error


class FailureWatch:
    """One rank's output, watched as it passes for what its failure needs: its last lines and whether
    it got to its first step. A rank that fails before its first step with an error every attempt
    would meet (``repeats``) is a crash loop: ``failed`` says so and ``stop_restarts`` ends torchrun's
    restarts, instead of starting the group again to fail the same way. Shared by the local rank
    wrapper and the pods' relay, so a laptop and a cluster stop the same loops."""

    def __init__(self) -> None:
        self.last: collections.deque[str] = collections.deque(maxlen=200)  # a traceback's lines
        self.stepped = False
        self.step, self.total = 0, 0

    def saw(self, lines: Iterable[str], records: Iterable[Mapping[str, object]] = ()) -> None:
        """Lines the rank wrote, and the metric records its output and logger files made of them."""
        self.last.extend(line.rstrip() for line in lines)
        for r in records:
            if r.get("event") == "step":
                self.stepped = True
                step, total = r.get("step"), r.get("total_steps")
                self.step = max(self.step, step if isinstance(step, int) else 0)
                self.total = total if isinstance(total, int) and total > 0 else self.total

    def aborted_after_its_work(self, code: int, reached_exit: bool = False) -> bool:
        """The rank died of SIGABRT with the C++ runtime's ``terminate called without an active
        exception`` after its work was done: PyTorch's gloo threads outliving the interpreter as it
        exits (torch 2.x, now and then; a third of the runs of a small DDP script here). Done means
        the script reached its exit (``reached_exit``: ``relay.ExitMark``; a rank that prints no
        steps, as Lightning's rank 1, is known only so) or its last step (its own N/N), and raised
        nothing on the way. Such a rank is not failed, nor restarted to do it all again."""
        tail = [line for line in self.last if line.strip()]
        return (
            code == -signal.SIGABRT
            and any(TEARDOWN_ABORT in line for line in tail[-3:])
            and (reached_exit or 0 < self.total <= self.step)
            and not any(TRACEBACK_HEAD in line for line in tail[-TRACEBACK_LOOKBACK:])
        )

    def failed(self, code: int, restart: int, max_restarts: int) -> tuple[dict[str, str], bool]:
        """The error of a rank that exited with status ``code`` > 0 on attempt ``restart`` + 1 (of
        ``max_restarts`` + 1), and whether it is a crash loop to stop (only where another attempt
        was still to come)."""
        error = failure(list(self.last), code)
        loop = error.pop("repeats", "") == "yes" and not self.stepped and restart < max_restarts
        if loop:
            error["message"] += (
                f"; not restarted: it failed before its first step on attempt {restart + 1}, "
                "and every attempt would fail the same way"
            )
        return error, loop


def failure(last: list[str], code: int) -> dict[str, str]:
    """The error a failed script's last lines show: a Python traceback's whole message, where it was
    raised and whether another attempt would meet it (``traceback_error``); else the last line and
    the exit status."""
    error = traceback_error(last)
    if error is not None:
        return error
    tail = last[-1].strip() if last else "no output"
    return {"message": f"exited with status {code}: {tail[:300]}", "hint": "the rank's log has its output"}


def attempt() -> tuple[int, int]:
    """This rank's attempt (torchrun's restart count) and the restarts torchrun allows it."""
    try:
        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        allowed = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    except ValueError:
        return 0, 0
    return restart, allowed


def stop_restarts() -> None:
    """A crash loop: ask torchrun (this process's parent, the rank's agent) to end the run rather than
    start the group again; it stops the other ranks and exits, and the run ends failed with this
    rank's error."""
    with contextlib.suppress(OSError):
        os.kill(os.getppid(), signal.SIGTERM)
