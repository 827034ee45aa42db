"""What each rank carries for hang triage: a daemon thread that, when asked, writes where every
thread of the rank is and what PyTorch's Flight Recorder holds, without stopping the rank.

It is asked through a file: ``request`` in the triage folder (``TORCHDECK_TRIAGE_DIR``) holding a
token. The thread looks at it four times a second; when the token changes it writes
``rank-N.json`` (whole, by a rename) with that token:

- ``threads``: each thread's stack (``sys._current_frames``: outermost frame first; the main
  thread marked), read from this thread while the others run or wait in a collective (PyTorch
  releases the interpreter while it waits, and a ``time.sleep`` does too);
- ``flight_recorder``: the newest entries of PyTorch's Flight Recorder (``TORCH_FR_BUFFER_SIZE``,
  which torchdeck sets for its runs), where a process group exists: each collective's op, sequence
  number, sizes and whether it completed (gloo records them in the torch torchdeck pins, as NCCL
  does); else ``flight_recorder_note`` says why there is none.

In pods nobody writes that file: there (``TORCHDECK_TRIAGE_AFTER_S``) the probe dumps by itself once
the main thread has stayed on one line that long, and says the dump in the rank's log.

A file, not a signal: a signal's Python handler runs only when the main thread runs Python, and a
rank that hangs waits in C++. The built-in trainer starts the probe itself; a user's script gets it
from ``exitmark/sitecustomize.py``, which every rank of a user's script imports first. The folder's
variable is taken out of the environment, so a process the rank starts is not probed as the rank.
Standard library only: the code bundle carries this file beside the relay."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import traceback

TRIAGE_DIR_ENV = "TORCHDECK_TRIAGE_DIR"
STUCK_ENV = "TORCHDECK_TRIAGE_AFTER_S"
"""Where set (in pods, where nobody can write the request file): the probe dumps by itself once the
rank's main thread has stayed on one line of Python this many seconds, and says the dump on the
rank's stderr as a schema-1 line (``"event": "triage"``), which the pod's log carries."""
FR_BUFFER_SIZE = "256"
"""Flight Recorder entries a rank keeps (``TORCH_FR_BUFFER_SIZE``) where the run's spec sets none:
a few hundred collectives, some KB of memory."""
FR_ENTRIES = 32
"""The newest Flight Recorder entries kept in a dump (of the buffer's ``TORCH_FR_BUFFER_SIZE``)."""
POLL_S = 0.25


def start(environ: dict[str, str] | os._Environ[str] | None = None) -> threading.Thread | None:
    """Start the probe where the environment names a triage folder and this process is a rank."""
    env = os.environ if environ is None else environ
    rank = env.get("RANK", "")
    if not rank.isdigit():  # torchrun itself, or a wrapper: its ranks are to get the folder
        return None
    folder = env.pop(TRIAGE_DIR_ENV, "")
    try:
        stuck_after = float(env.pop(STUCK_ENV, "0") or 0)
    except ValueError:
        stuck_after = 0.0
    if not folder:
        return None
    args = (folder, int(rank), stuck_after, time.time())
    thread = threading.Thread(target=_watch, args=args, name="torchdeck-triage", daemon=True)
    thread.start()
    return thread


def _token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read(200).strip()
    except OSError:
        return ""


def _watch(folder: str, rank: int, stuck_after: float = 0.0, started: float = 0.0) -> None:
    request = os.path.join(folder, "request")
    try:  # a request made before this rank started is not for it (one made as it starts is: a
        # file's time is the kernel's coarse clock, a few ms behind time.time(), hence the second)
        seen = _token(request) if os.stat(request).st_mtime < started - 1.0 else ""
    except OSError:
        seen = ""
    main = threading.main_thread().ident
    where: tuple[int, int] | None = None
    since, told = time.monotonic(), False
    while True:
        time.sleep(POLL_S)
        token = _token(request)
        if token and token != seen:
            seen = token
            _answer(folder, rank, token)
        if stuck_after <= 0:
            continue
        frame = sys._current_frames().get(main or 0)
        here = (id(frame.f_code), frame.f_lineno) if frame is not None else None
        now = time.monotonic()
        if here != where:  # the main thread moved: a new spell begins
            where, since, told = here, now, False
        elif here is not None and not told and now - since >= stuck_after:
            told = True
            record = _answer(folder, rank, f"stuck-{time.time_ns()}")
            if record is not None:  # one write: a pipe keeps a line of up to 4 KB whole
                line = json.dumps(
                    {"schema": 1, "event": "triage", "rank": rank, "time": record["time"], "dump": record}
                )
                os.write(2, (line + "\n").encode())


def _answer(folder: str, rank: int, token: str) -> dict | None:
    try:
        return dump(folder, rank, token)
    except Exception as exc:  # never the rank's end: said in its log, asked again next time
        print(f"torchdeck: triage dump failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return None


def stacks(skip: int | None = None) -> list[dict]:
    """Every thread's stack but ``skip``'s, outermost frame first."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main = threading.main_thread().ident
    found = []
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        frames = [
            {"file": f.filename, "line": f.lineno or 0, "function": f.name, "code": (f.line or "").strip()}
            for f in traceback.extract_stack(frame)
        ]
        found.append({"name": names.get(ident, f"thread {ident}"), "main": ident == main, "frames": frames})
    found.sort(key=lambda t: not t["main"])
    return found


def flight_recorder() -> dict:
    """The newest Flight Recorder entries, or a note that says why there are none."""
    dist = sys.modules.get("torch.distributed")  # a rank with a process group has it: never imported here
    if dist is None:
        return {"flight_recorder": None, "flight_recorder_note": "the rank has not imported torch.distributed"}
    try:
        if not dist.is_available() or not dist.is_initialized():
            return {"flight_recorder": None, "flight_recorder_note": "no process group yet"}
        if not int(os.environ.get("TORCH_FR_BUFFER_SIZE", os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")) or 0):
            return {"flight_recorder": None, "flight_recorder_note": "TORCH_FR_BUFFER_SIZE is 0: nothing recorded"}
        import importlib

        # the dump's one entry point, as PyTorch's Flight Recorder guide gives it (no public name yet)
        c10d = importlib.import_module("torch._C._distributed_c10d")
        dump_json = getattr(c10d, "_dump_fr_trace_json", None)  # torch 2.7 and later
        if dump_json is None:
            return {"flight_recorder": None, "flight_recorder_note": "this torch has no Flight Recorder dump"}
        entries = json.loads(dump_json(True, True)).get("entries") or []
    except Exception as exc:  # an older torch, a backend that records nothing
        return {"flight_recorder": None, "flight_recorder_note": f"{type(exc).__name__}: {exc}"[:300]}
    keep = ("collective_seq_id", "p2p_seq_id", "profiling_name", "input_sizes", "input_dtypes", "retired", "state")
    kept = [{k: e.get(k) for k in keep} | {"pg": (e.get("process_group") or ["", ""])[-1]} for e in entries]
    return {"flight_recorder": kept[-FR_ENTRIES:]}


def dump(folder: str, rank: int, token: str) -> dict:
    """Write ``rank-N.json`` for ``token``; what it holds."""
    record = {
        "schema": 1,
        "token": token,
        "rank": rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "time": time.time(),
        "threads": stacks(skip=threading.get_ident()),
        **flight_recorder(),
    }
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"rank-{rank}.json")
    with open(path + ".new", "w", encoding="utf-8") as file:
        json.dump(record, file)
    os.replace(path + ".new", path)
    return record
