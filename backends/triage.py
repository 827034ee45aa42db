"""Hang triage: ask every rank where it is (``trainer/triage_probe.py`` answers from inside the
rank), then say in one paragraph which rank is not where the others are, at which line of the
user's code, in which collective the others wait, and where that rank runs.

The probe's dumps (``rank-N.json``) and the verdict (``triage.json``) stay in the triage folder:
the run's ``triage/`` locally. Standard library only, and nothing of the backends' records: the
backends and the front ends read ``Triage`` alike."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from .errors import BackendError, SpecError
from .files import load_json, write_atomically
from .schema import count
from .states import JobState

LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "<frozen ", "/torchdeck/trainer/", "/.torchdeck/")
"""Paths that are not the user's code: installed packages, the interpreter's own modules (below),
torchdeck's rank wrappers."""
COLLECTIVE_FILES = ("torch/distributed/distributed_c10d.py", "torch/distributed/_functional_collectives.py")
MAX_DUMP = 8 << 20
"""A rank's dump is its threads' stacks: a few KB to a few hundred; more is not a dump."""
MAX_THREADS, MAX_FRAMES, MAX_ENTRIES = 256, 256, 1024
"""What a dump is read for at most: a rank has tens of threads, frames and recorded collectives."""
MAX_TEXT = 1024
"""A file name, a function, a line of source, a host: longer is cut."""
WRAPPERS = {"wrapper", "_wrapper", "inner"}
"""torch.distributed's decorators' frames: the collective is the frame below them."""


@dataclass
class Collective:
    """A collective as PyTorch's Flight Recorder saw it."""

    op: str
    """As the recorder names it: ``gloo:all_reduce``, ``nccl:all_reduce``."""
    seq: int
    """Its sequence number in its process group (the same collective has the same on every rank)."""
    sizes: list[Any] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    pg: str = ""
    completed: bool = False

    def words(self) -> str:
        shape = ", ".join(f"{d}{s}" for d, s in zip(self.dtypes, self.sizes, strict=False))
        return f"#{self.seq} {self.op}" + (f" ({shape})" if shape else "") + (f" in group {self.pg}" if self.pg else "")


@dataclass
class RankWhere:
    """Where one rank was when asked."""

    rank: int
    host: str = ""
    pid: int = 0
    where: str = ""
    """The user's code: ``file:line`` of the innermost frame of the main thread that is theirs."""
    function: str = ""
    code: str = ""
    """That line's source."""
    waiting_in: str = ""
    """The torch.distributed call the main thread is in (``all_reduce``), or empty."""
    collective: Collective | None = None
    """The newest collective the Flight Recorder holds for the rank (in flight where not completed)."""
    node: str = ""
    """Where it runs, in the backend's words (a pod and its node on a cluster)."""
    threads: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return self.where, self.waiting_in


@dataclass
class Triage:
    run_id: str
    time: float
    summary: str
    """The paragraph: which rank(s), at which line, in which collective the others wait, where."""
    outliers: list[int] = field(default_factory=list)
    ranks: list[RankWhere] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    """Ranks that did not answer (dead, or holding the interpreter)."""
    folder: str = ""
    """Where the raw dumps are."""
    flight_recorder_note: str = ""
    """Why no Flight Recorder entries came with the dumps, where none did."""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Triage:
        ranks = []
        for r in data.get("ranks") or []:
            c = r.get("collective")
            ranks.append(RankWhere(**{**r, "collective": Collective(**c) if c else None}))
        return cls(**{**data, "ranks": ranks})


class Frame(TypedDict):
    """A frame of a rank's thread, as the dump's gate keeps it."""

    file: str
    line: int
    function: str
    code: str


class RecorderEntry(TypedDict):
    """A Flight Recorder entry, as the dump's gate keeps it (``triage_probe.flight_recorder``'s fields)."""

    profiling_name: str
    collective_seq_id: int
    p2p_seq_id: int
    input_sizes: list[list[int]]
    input_dtypes: list[str]
    pg: str
    retired: bool
    state: str


def _user_frame(frames: list[dict]) -> dict | None:
    """The innermost frame of the user's code (not a package's, the interpreter's or torchdeck's)."""
    for frame in reversed(frames):
        path = str(frame.get("file", "")).replace("\\", "/")
        stdlib = "/lib/python3" in path and "-packages/" not in path
        if not stdlib and not any(part in path for part in LIBRARY_PARTS):
            return frame
    return frames[-1] if frames else None


def _collective_call(frames: list[dict]) -> str:
    for frame in reversed(frames):
        path = str(frame.get("file", "")).replace("\\", "/")
        if any(path.endswith(f) for f in COLLECTIVE_FILES) and frame.get("function") not in WRAPPERS:
            name = str(frame.get("function", ""))
            if not name.startswith("_") or name in ("_all_gather_base", "_reduce_scatter_base"):
                return name
    return ""


def _collective(entries: list[dict] | None) -> Collective | None:
    """The newest entry of the default group (the first group's where none is named default)."""
    if not entries:
        return None
    groups = {str(e.get("pg", "")) for e in entries}
    pg = "default_pg" if "default_pg" in groups else str(entries[-1].get("pg", ""))
    mine = [e for e in entries if str(e.get("pg", "")) == pg and not e.get("p2p_seq_id")] or entries
    e = mine[-1]
    return Collective(
        op=str(e.get("profiling_name") or "?"),
        seq=int(e.get("collective_seq_id") or 0),
        sizes=list(e.get("input_sizes") or []),
        dtypes=[str(d) for d in e.get("input_dtypes") or []],
        pg="" if pg == "default_pg" else pg,
        completed=bool(e.get("retired")) or e.get("state") == "completed",
    )


def _text(value: object, cap: int = MAX_TEXT) -> str:
    return value[:cap] if isinstance(value, str) else ""


def _frame(value: object) -> Frame | None:
    if not isinstance(value, dict):
        return None
    return {
        "file": _text(value.get("file")),
        "line": count(value.get("line")) or 0,
        "function": _text(value.get("function"), 256),
        "code": _text(value.get("code")),
    }


def _entry(value: object) -> RecorderEntry | None:
    """One Flight Recorder entry, as ``triage_probe.flight_recorder`` keeps it."""
    if not isinstance(value, dict):
        return None
    sizes = value.get("input_sizes")
    dtypes = value.get("input_dtypes")
    return {
        "profiling_name": _text(value.get("profiling_name"), 128),
        "collective_seq_id": count(value.get("collective_seq_id")) or 0,
        "p2p_seq_id": count(value.get("p2p_seq_id")) or 0,
        "input_sizes": [
            [count(n) or 0 for n in shape[:8]] if isinstance(shape, list) else []
            for shape in (sizes[:16] if isinstance(sizes, list) else [])
        ],
        "input_dtypes": [_text(d, 32) for d in (dtypes[:16] if isinstance(dtypes, list) else [])],
        "pg": _text(value.get("pg"), 128),
        "retired": value.get("retired") is True,
        "state": _text(value.get("state"), 32),
    }


def checked_dump(value: object, rank: int) -> dict[str, Any] | None:
    """A rank's dump as read: every field of the type it must be, numbers bounded, strings and lists
    capped, and the rank the one it came from (its file's, its pod's), never the one it claims; None
    where it is no dump. The one gate every dump passes, from a file or from a pod's log."""
    if not isinstance(value, dict) or not isinstance(value.get("threads"), list):
        return None
    threads = []
    for thread in value["threads"][:MAX_THREADS]:
        if isinstance(thread, dict) and isinstance(thread.get("frames"), list):
            frames = [f for f in map(_frame, thread["frames"][-MAX_FRAMES:]) if f is not None]
            threads.append(
                {"name": _text(thread.get("name"), 128), "main": thread.get("main") is True, "frames": frames}
            )
    recorded = value.get("flight_recorder")
    entries = None
    if isinstance(recorded, list):
        entries = [e for e in map(_entry, recorded[-MAX_ENTRIES:]) if e is not None]
    return {
        "rank": rank,
        "pid": count(value.get("pid")) or 0,
        "host": _text(value.get("host"), 253),
        "threads": threads,
        "flight_recorder": entries,
        "flight_recorder_note": _text(value.get("flight_recorder_note"), 300),
    }


def rank_where(dump: dict, node: str = "") -> RankWhere:
    """One rank's dump (``triage_probe.dump``) read: where its main thread is."""
    threads = dump.get("threads") or []
    main = next((t for t in threads if t.get("main")), threads[0] if threads else {"frames": []})
    frames = main.get("frames") or []
    user = _user_frame(frames) or {}
    return RankWhere(
        rank=int(dump.get("rank", -1)),
        host=str(dump.get("host", "")),
        pid=int(dump.get("pid", 0)),
        where=f"{os.path.basename(str(user.get('file', '?')))}:{user.get('line', 0)}" if user else "",
        function=str(user.get("function", "")),
        code=str(user.get("code", "")),
        waiting_in=_collective_call(frames),
        collective=_collective(dump.get("flight_recorder")),
        node=node or str(dump.get("host", "")),
        threads=len(threads),
    )


def _ranks_words(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _at(r: RankWhere) -> str:
    text = f"{r.where}" + (f" in {r.function}()" if r.function and r.function != "<module>" else "")
    return text + (f": `{r.code}`" if r.code else "")


def explain(run_id: str, found: list[RankWhere], world_size: int, folder: str = "", note: str = "") -> Triage:
    """The verdict on a run's ranks: the odd ones out, by where their main thread is (and, where
    the Flight Recorder says, by the collective each has reached)."""
    found = sorted(found, key=lambda r: r.rank)
    missing = sorted(set(range(world_size)) - {r.rank for r in found})
    counts = Counter(r.key for r in found)
    outliers: list[int] = []
    lines: list[str] = []
    if found:
        (common, n), *rest = counts.most_common()
        if rest and n == rest[0][1]:  # no majority: prefer the place where ranks wait in a collective
            waiting = [k for k, c in counts.items() if c == n and k[1]]
            common = waiting[0] if waiting else common
        others = [r for r in found if r.key == common]
        outliers = [r.rank for r in found if r.key != common]
        seqs = {r.collective.seq for r in others if r.collective}
        if not outliers and len(seqs) > 1:  # all at one line, but not in the same collective
            newest = max(seqs)
            outliers = [r.rank for r in others if r.collective and r.collective.seq < newest]
            others = [r for r in others if r.rank not in outliers]
        ahead = others[0] if others else None
        for r in (x for x in found if x.rank in outliers):
            said = f"{_ranks_words([r.rank]).capitalize()} is not where the others are: it is at {_at(r)}"
            said += f", in {r.waiting_in}" if r.waiting_in else ""
            said += f", on {r.node} (pid {r.pid})." if r.node else f" (pid {r.pid})."
            if r.collective and ahead and ahead.collective and r.collective.seq < ahead.collective.seq:
                done = "completed" if r.collective.completed else "not completed"
                said += f" Its newest collective is #{r.collective.seq} ({done}); it has not entered #{ahead.collective.seq}."
            lines.append(said)
        if ahead:
            group = [r.rank for r in others]
            text = f"{_ranks_words(group).capitalize()} {'is' if len(group) == 1 else 'are'}"
            if ahead.waiting_in:
                text += f" waiting in {ahead.waiting_in} at {_at(ahead)}"
                if ahead.collective and not ahead.collective.completed:
                    text += f", collective {ahead.collective.words()}"
            else:
                text += f" at {_at(ahead)}, in no collective"
            if not outliers:
                text += " - every rank that answered is there"
                text += (
                    ": the cause is below the script (a peer that is gone, the network, the GPU)."
                    if ahead.waiting_in
                    else "."
                )
            else:
                text += "."
            lines.append(text)
    if missing:
        lines.append(f"{_ranks_words(missing).capitalize()} did not answer (exited, or holding the interpreter).")
    if not found:
        lines.append(
            "No rank answered: none runs the probe (an image without torchdeck's probe?), or every one is gone."
        )
    summary = " ".join(lines)
    return Triage(run_id, time.time(), summary, outliers, found, missing, folder, note)


def verdict(
    run_id: str,
    world_size: int,
    dumps: Mapping[int, object],
    where: str,
    node_of: Callable[[int, dict[str, Any]], str] = lambda rank, dump: "",
) -> Triage:
    """The verdict on the dumps the ranks gave, each keyed by the rank whose stream or file it came
    from (``node_of``: where that rank runs, in the backend's words), with why no Flight Recorder
    entries came where none did. Every dump passes ``checked_dump`` here."""
    checked = [
        (r, checked_dump(d, r)) for r, d in sorted(dumps.items()) if 0 <= r and (r < world_size or world_size <= 0)
    ]
    kept = [(r, d) for r, d in checked if d is not None]
    found = [rank_where(d, node=node_of(r, d)) for r, d in kept]
    notes = {str(d["flight_recorder_note"]) for _, d in kept if d["flight_recorder"] is None}
    return explain(run_id, found, world_size, where, "; ".join(sorted(notes)))


def require_running(run_id: str, state: JobState) -> None:
    """Only a running run's ranks can say where they are: a BackendError for one that has ended."""
    if state.is_terminal:
        raise BackendError(
            f"run {run_id} has {state.value}: only a running run's ranks can say where they are",
            f"torchdeck status {run_id} shows its newest triage, if one was made",
        )


def triage_line(text: str) -> dict[str, object] | None:
    """The dump a probe said in a rank's log (``{"schema": 1, "event": "triage", ..., "dump": {...}}``,
    as ``triage_probe`` writes it where it dumps by itself), or None for any other line."""
    if '"triage"' not in text or not text.lstrip().startswith("{"):
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    dump = record.get("dump") if isinstance(record, dict) and record.get("event") == "triage" else None
    return dump if isinstance(dump, dict) and isinstance(dump.get("threads"), list) else None


def ask(folder: Path, world_size: int, wait_s: float = 5.0, poll_s: float = 0.1) -> tuple[dict[int, dict], str]:
    """Ask every rank probing into ``folder`` where it is; the dumps that answered within ``wait_s``
    (each rank's probe looks four times a second), by the rank whose file each is, and the token
    asked with."""
    folder.mkdir(parents=True, exist_ok=True)
    token = f"{time.time_ns()}-{secrets.token_hex(4)}"
    write_atomically(folder / "request", token + "\n")
    deadline = time.monotonic() + wait_s
    answered: dict[int, dict] = {}
    while True:
        for rank in range(world_size):
            if rank in answered:
                continue
            try:  # the run's folder passes the gates any file does (a link, a huge file: no answer)
                dump = load_json(folder / f"rank-{rank}.json", max_bytes=MAX_DUMP)
            except (OSError, SpecError):
                continue
            if isinstance(dump, dict) and dump.get("token") == token:
                answered[rank] = dump
        if len(answered) == world_size or time.monotonic() > deadline:
            return {r: answered[r] for r in sorted(answered)}, token
        time.sleep(poll_s)


def save(folder: Path, triage: Triage) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(folder / "triage.json", json.dumps(triage.to_dict(), indent=1) + "\n")


def load(folder: Path) -> Triage | None:
    """The newest verdict saved in ``folder``; None where there is none (or it cannot be read)."""
    try:
        return Triage.from_dict(load_json(folder / "triage.json", max_bytes=MAX_DUMP))
    except (OSError, SpecError, ValueError, TypeError, KeyError, AttributeError):
        return None
