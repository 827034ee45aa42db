"""A failed rank's last words, read from its output: a Python traceback's whole message, the line of
the user's code that raised it, whether another attempt would meet it again, and what a script that
asks for CUDA or NCCL where there is none means. Standard library only: it runs in the local rank
wrapper beside the user's code and in the console's log reader."""

from __future__ import annotations

import re

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
    start = max((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), default=-1)
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
