"""``python -m torchdeck.backends.local_launcher RUN_DIR``: the process that
owns one local run. It leads its own session, so closing the console or
losing the SSH connection leaves the job running; it starts torchrun, waits
for it, and records the exit status in the run folder for whoever reattaches.

It outlives a SIGTERM sent to its process group (``torchdeck stop``) just
long enough to record that the run ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def write_json(path: Path, data: dict) -> None:
    """Write JSON atomically: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0])
    launch = json.loads((run_dir / "launch.json").read_text())
    received: list[int] = []
    # A handler, not SIG_IGN: an ignored signal would stay ignored in torchrun
    # across exec, and torchrun must see the stop request too.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: received.append(signum))
    env = dict(os.environ, **launch["env"])
    with open(run_dir / "launcher.log", "ab", buffering=0) as log:
        try:
            child = subprocess.Popen(
                launch["cmd"],
                cwd=launch["cwd"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            log.write(f"torchdeck: cannot start torchrun: {exc}\n".encode())
            write_json(run_dir / "exit.json", {"exit_code": 127, "finished_at": time.time(), "signals": received})
            return 127
        while True:
            try:
                code = child.wait()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue
    write_json(run_dir / "exit.json", {"exit_code": code, "finished_at": time.time(), "signals": received})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
