"""One rank of a user's script on the local backend, between torchrun and the
script: it runs the script with its stderr joined to its stdout, passes every
line through unchanged (torchrun writes it to the rank's log), and appends the
metric records it finds in them (``textmetrics``), and in the logger files the
script writes (``trainer/logfiles.py``), to the rank's metric file, as the
built-in trainer writes its own. A rank that fails before its first step with
an error every attempt would meet stops torchrun's restarts. Signals reach the script; the script's
exit status is this process's.

    python -m torchdeck.backends.rank_output METRICS_FILE PATTERN -- COMMAND...

``{rank}`` in METRICS_FILE is the rank (torchrun's RANK); an empty PATTERN
means the built-in text formats. Standard library only, and started per rank."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import signal
import sys
import time

from torchdeck.backends.textmetrics import TextMetrics
from torchdeck.backends.tracebacks import traceback_error
from torchdeck.trainer.logfiles import LoggerFiles
from torchdeck.trainer.relay import start_rank
from torchdeck.trainer.rewrites import Rewrites

MAX_READ = 1 << 20
"""Bytes of one line held at most: a script that writes gigabytes without a newline is passed
through as it comes and read in pieces, never held whole."""


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m torchdeck.backends.rank_output METRICS_FILE PATTERN -- COMMAND...", file=sys.stderr)
        return 2
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "0"))
    metrics_path, pattern, command = argv[0].replace("{rank}", str(rank)), argv[1] or None, argv[3:]
    parser = TextMetrics(rank, world, pattern)
    child = start_rank(command, child_env())
    if child is None:
        return 127
    out = sys.stdout.buffer
    assert child.stdout is not None
    last: collections.deque[str] = collections.deque(maxlen=200)  # a traceback's lines, for its error
    with open(metrics_path, "ab", buffering=0) as metrics:

        def write_all(records: list[dict]) -> None:
            metrics.write(b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records))

        def write(record: dict) -> None:
            write_all([record])

        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        program = (
            " ".join(command[2:4])
            if command[2:3] == ["-m"]
            else os.path.basename(command[2] if len(command) > 2 else "")
        )
        write(start_record(rank, world, restart, program))
        reader, fd, stepped = Rewrites(max_line=MAX_READ), child.stdout.fileno(), False
        loggers = LoggerFiles.for_rank(child.pid)
        polled = 0.0  # the first look at once: a logger found early keeps the printed loss off its curve
        while True:
            if time.monotonic() - polled >= LOGGER_POLL_S:
                polled = time.monotonic()
                for logged in loggers.poll():
                    write(logged)
                parser.loss_elsewhere = loggers.found_loss
            if select.select([fd], [], [], reader.every_s)[0]:
                time.sleep(GATHER_S)  # let a chatty script's lines gather: one wake-up reads dozens
                data = os.read(fd, 1 << 20)
                if not data:
                    break
                out.write(data)  # the script's bytes, unchanged (a bar's \r included)
                out.flush()
                lines = reader.feed(data)
            else:
                lines = reader.idle()  # a bar that paused: its newest state
            found = [r for r in map(parser.feed, lines) if r is not None]
            last.extend(line.rstrip() for line in lines)
            if found:
                write_all(found)
                stepped = stepped or any(r.get("event") == "step" for r in found)
        for line in reader.close():
            last.append(line.rstrip())
            if (said := parser.feed(line)) is not None:
                write(said)
        code = child.wait()
        for logged in loggers.poll():  # what the loggers wrote as they closed
            write(logged)
        if code == 0:
            write(parser.record("done"))
        elif code > 0:  # a signal is a stop, not the script's error
            error = failure(list(last), code)
            if stepped is False and error.pop("repeats", "") == "yes" and restart < max_restarts():
                error["message"] += (
                    f"; not restarted: it failed before its first step on attempt {restart + 1}, "
                    "and every attempt would fail the same way"
                )
                write({**parser.record("error"), **error})
                stop_restarts()
            else:
                error.pop("repeats", None)
                write({**parser.record("error"), **error})
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says


def child_env() -> dict[str, str]:
    """The script's environment: ours, with TORCHDECK_USER_PATH (where ``torchdeck.report`` is, for a
    script in an environment without torchdeck) after its own PYTHONPATH."""
    env = dict(os.environ)
    extra = env.pop("TORCHDECK_USER_PATH", "")
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), extra) if p)
    return env


def start_record(rank: int, world: int, restart: int, program: str) -> dict:
    return {
        "schema": 1,
        "event": "start",
        "rank": rank,
        "world_size": world,
        "restart_count": restart,
        "model": program,
        "time": time.time(),
    }


GATHER_S = 0.05
"""How long output is let gather before it is read: a script printing a line a millisecond costs one
wake-up per 50 lines, not one per line (what torchdeck's reading costs a training: the benchmark
benchmarks/user_code_overhead.py)."""
LOGGER_POLL_S = 2.0
"""How often the logger files are looked at: a directory walk and a read of what they gained."""


def max_restarts() -> int:
    try:
        return int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    except ValueError:
        return 0


def stop_restarts() -> None:
    """A crash loop: ask torchrun (this process's parent, the rank's agent) to end the run rather than
    start the group again; it stops the other ranks and exits, and the run ends failed with this
    rank's error."""
    with contextlib.suppress(OSError):
        os.kill(os.getppid(), signal.SIGTERM)


def failure(last: list[str], code: int) -> dict[str, str]:
    """The error a failed script's last lines show: a Python traceback's whole message, where it was
    raised and whether another attempt would meet it (``traceback_error``); else the last line and
    the exit status."""
    error = traceback_error(last)
    if error is not None:
        return error
    tail = last[-1].strip() if last else "no output"
    return {"message": f"exited with status {code}: {tail[:300]}", "hint": "the rank's log has its output"}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
