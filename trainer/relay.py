"""``python relay.py PROGRAM [ARGS...]`` (PROGRAM a script, or ``-m MODULE``): one rank of the user's code in a pod, between torchrun and
the script, as the local backend's rank wrapper is on a laptop. It runs ``python -u PROGRAM ARGS``
with its stderr joined to its stdout and passes every line through, so that the pod's log is the
script's output, with these changes (the first two let the console read it live from the log):

- a line rewritten in place (a progress bar's ``\\r`` redraws, which the kubelet would keep as one
  line until the bar's epoch ends) becomes a line per state, its newest at most twice a second and
  its last always;
- the scalars the script writes with its loggers (TensorBoard, Lightning's CSV, MLflow's file store,
  Hugging Face's trainer state: ``logfiles.py``) become schema-1 JSON lines among its output;
- a rank that fails before its first step with an error every attempt would meet ends torchrun's
  restarts, with a schema-1 error line saying so (``tracebacks.FailureWatch``, as on a laptop).
- where Kubeflow Trainer gives the pod its status server, rank 0 posts the progress read there
  (``kubeflow_status.py``), so the TrainJob's own status shows it;
- a rank that aborts as its interpreter tears down (PyTorch's gloo threads), once the script had
  reached its exit (``ExitMark``), is done: its exit status is 0, and torchrun restarts nothing.

Signals reach the script; the script's exit status is this process's. Standard library only: the
code bundle carries this file with the modules it uses beside it (``.torchdeck/``), for an image that
has no torchdeck."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

try:
    from .kubeflow_status import TrainerStatus
    from .logfiles import LoggerFiles
    from .rewrites import Rewrites
    from .textmetrics import TextMetrics
    from .tracebacks import TEARDOWN_NOTE, FailureWatch, attempt, stop_restarts
except ImportError:  # run as a file from the code bundle: its copies lie beside it
    from kubeflow_status import TrainerStatus  # type: ignore[no-redef]
    from logfiles import LoggerFiles  # type: ignore[no-redef]
    from rewrites import Rewrites  # type: ignore[no-redef]
    from textmetrics import TextMetrics  # type: ignore[no-redef]
    from tracebacks import TEARDOWN_NOTE, FailureWatch, attempt, stop_restarts  # type: ignore[no-redef]

LOGGER_POLL_S = 2.0
BAR_ENV = {"COLUMNS": "200", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "NO_COLOR": "1"}
"""A rank's output goes to a pipe: with these, rich (Lightning's default bar where it is installed)
redraws its bar in place as on a terminal (``\\r``, no colours), on one line 200 columns wide,
rather than printing it once at the end wrapped at 80, so the bar is read as it updates, as tqdm's
is. The rank's own environment (a spec's ``env``) wins."""


class ExitMark:
    """Whether a rank's script got as far as the interpreter's exit: ``exitmark/sitecustomize.py``,
    which the script's python imports as it starts, writes to a pipe from its last atexit handler.
    A rank that dies of SIGABRT after that (PyTorch's gloo threads tearing down) has done its work,
    though it may never have printed a step (rank 1 of a Lightning run prints nothing)."""

    FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exitmark")

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the folder first on ``PYTHONPATH`` (so no ``sitecustomize`` of the script's own
        path, coverage's or a project's, hides the mark: the mark imports that one in turn), and the
        pipe's end named."""
        path = os.pathsep.join(p for p in (self.FOLDER, env.get("PYTHONPATH", "")) if p)
        return {**env, "PYTHONPATH": path, "TORCHDECK_EXIT_FD": str(self.write_fd)}

    def reached(self) -> bool:
        """Read once the script has exited: whether it said it reached its exit, and not through
        ``sys.exit`` with a failing status."""
        try:
            return os.read(self.read_fd, 16) == b"exit"
        except BlockingIOError:  # nothing written, and a worker it forked still holds the pipe
            return False
        finally:
            os.close(self.read_fd)


def start_rank(
    command: list[str], env: dict[str, str] | None = None, mark: ExitMark | None = None
) -> subprocess.Popen[bytes] | None:
    """Start a rank's program with its stderr joined to its stdout (a pipe; ``BAR_ENV`` where the
    environment says nothing else), the signals this process gets forwarded to it, and (``mark``)
    the pipe that says whether it reached its exit; None, said in one line, where it cannot start.
    Shared with the local backend's rank wrapper."""
    env = {**BAR_ENV, **(os.environ if env is None else env)}
    try:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env if mark is None else mark.env(env),
            pass_fds=() if mark is None else (mark.write_fd,),
        )
    except OSError as exc:
        print(f"torchdeck: cannot start {command[0]}: {exc.strerror or exc}", flush=True)
        return None
    finally:
        if mark is not None:  # the script's copy is its own: at its exit, the pipe has no writer left
            os.close(mark.write_fd)

    def forward(signum: int, frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    return child


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python relay.py PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    mark = ExitMark()
    child = start_rank([sys.executable, "-u", *argv], mark=mark)
    if child is None:
        return 127
    out = sys.stdout.buffer
    loggers = LoggerFiles.for_rank(child.pid)
    reader, polled = Rewrites(), 0.0
    rank, watch = int(os.environ.get("RANK", "0") or 0), FailureWatch()
    status = TrainerStatus(rank=rank)  # Kubeflow Trainer's own progress, where the pod was given its server
    try:  # the lines are read only to know whether the rank got to its first step
        parser: TextMetrics | None = TextMetrics(rank, 0, os.environ.get("TORCHDECK_METRICS_PATTERN") or None)
    except ImportError:  # a pattern, and no RE2 in the image: steps unknown, so never a crash loop
        parser = None
    assert child.stdout is not None
    fd = child.stdout.fileno()

    def say(lines: list[str]) -> None:
        if lines:
            out.write("".join(line.rstrip("\r\n") + "\n" for line in lines).encode(errors="replace"))
            out.flush()
            found = [r for r in map(parser.feed, lines) if r is not None] if parser else [{"event": "step"}]
            watch.saw(lines, found)
            for record in found:
                status.feed(record)

    def logged(last: bool = False) -> None:
        records = loggers.poll(last=last)
        out.write(loggers.take_notes())
        say([json.dumps(record, separators=(",", ":")) for record in records])

    while True:
        if time.monotonic() - polled >= LOGGER_POLL_S:
            polled = time.monotonic()
            logged()
        if select.select([fd], [], [], reader.every_s)[0]:
            data = os.read(fd, 1 << 16)
            if not data:
                break
            say(reader.feed(data))
        else:
            say(reader.idle())
    say(reader.close())
    code = child.wait()
    logged(last=True)  # what the loggers wrote as they closed
    status.close()
    restart, allowed = attempt()
    if watch.aborted_after_its_work(code, mark.reached()):
        say([f"torchdeck: {TEARDOWN_NOTE}"])
        return 0
    if code > 0:
        error, crash_loop = watch.failed(code, restart, allowed)
        if crash_loop:  # said where the console reads the rank, then torchrun is asked to stop
            say([json.dumps({"schema": 1, "event": "error", "rank": rank, "time": time.time(), **error})])
            stop_restarts()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
