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

import json
import os
import select
import sys
import time

from torchdeck.trainer.logfiles import LoggerFiles
from torchdeck.trainer.relay import LOGGER_POLL_S, ExitMark, start_rank
from torchdeck.trainer.rewrites import Rewrites
from torchdeck.trainer.textmetrics import TextMetrics
from torchdeck.trainer.tracebacks import TEARDOWN_NOTE, FailureWatch, attempt, stop_restarts

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
    mark = ExitMark()
    child = start_rank(command, child_env(), mark)
    if child is None:
        return 127
    out = sys.stdout.buffer
    assert child.stdout is not None
    watch = FailureWatch()
    with open(metrics_path, "ab", buffering=0) as metrics:

        def write_all(records: list[dict]) -> None:
            metrics.write(b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records))

        def write(record: dict) -> None:
            write_all([record])

        restart, allowed = attempt()
        program = (
            " ".join(command[2:4])
            if command[2:3] == ["-m"]
            else os.path.basename(command[2] if len(command) > 2 else "")
        )
        write(start_record(rank, world, restart, program))
        reader, fd = Rewrites(max_line=MAX_READ), child.stdout.fileno()
        loggers = LoggerFiles.for_rank(child.pid)
        polled = 0.0  # the first look at once: a logger found early keeps the printed loss off its curve
        while True:
            if time.monotonic() - polled >= LOGGER_POLL_S:
                polled = time.monotonic()
                logged = loggers.poll()
                out.write(loggers.take_notes())
                write_all(logged)
                watch.saw((), logged)
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
            watch.saw(lines, found)
            if found:
                write_all(found)
        lines = reader.close()
        found = [r for r in map(parser.feed, lines) if r is not None]
        watch.saw(lines, found)
        write_all(found)
        code = child.wait()
        write_all(loggers.poll(last=True))  # what the loggers wrote as they closed
        out.write(loggers.take_notes())
        if code == 0 or watch.aborted_after_its_work(code, mark.reached()):
            if code:  # said in the rank's log, and the rank ends as done
                out.write(f"torchdeck: {TEARDOWN_NOTE}\n".encode())
                out.flush()
                code = 0
            write(parser.record("done"))
        elif code > 0:  # a signal is a stop, not the script's error
            error, crash_loop = watch.failed(code, restart, allowed)
            write({**parser.record("error"), **error})
            if crash_loop:
                stop_restarts()
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

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
