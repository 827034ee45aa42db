"""Scalars that a training script writes with the usual loggers, read as they are written, with no
change to the script: TensorBoard event files (``SummaryWriter``, Lightning's TensorBoardLogger,
Hugging Face), Lightning's ``metrics.csv`` (CSVLogger), MLflow's local stores (the ``mlruns/``
files, and ``mlflow.db``, its SQLite default where SQLAlchemy is installed) and Hugging Face's
``trainer_state.json``. Each becomes schema-1 metric records (``torchdeck.trainer
.metrics``) on the same per-rank curves as the script's printed lines.

Standard library only: it runs beside the user's code (the local rank wrapper, the pods' relay), where
neither the console's dependencies nor TensorBoard's may be installed. TensorBoard's own reader needs
TensorFlow's protobuf classes and its package (about 30 MB and a second to import); its files are
TFRecords of ``Event`` messages, a format fixed since 2015, whose few fields read here (wall time,
step, and a value's tag with its simple value or float tensor) are decoded in a few dozen lines.

Which scalar is what comes from its name (``metric_role``): ``train/loss``, ``loss`` and
``train_loss_step`` are the training loss; ``val_loss``, ``loss/test`` and ``eval_loss`` a held-out
loss; ``val/acc``, ``accuracy`` an accuracy. A spec's ``metrics.tags`` names them where the names
do not say."""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import os
import re
import struct
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

try:
    from .regular_files import NotRegularFile, open_regular, read_at_most
except ImportError:  # run from the code bundle (the relay): its copy lies beside this file
    from regular_files import NotRegularFile, open_regular, read_at_most  # type: ignore[no-redef]

ROLES = ("loss", "val_loss", "accuracy", "val_accuracy")
IGNORED = frozenset({"v_num", "epoch", "step", "global_step", "it", "batch", "lr", "learning_rate", "hp_metric"})
HELD_OUT_RE = re.compile(r"(?:^|_)(?:val|valid|validation|test|eval|evaluation|dev)(?:_|$)")
ACCURACY_RE = re.compile(r"(?:^|_)(?:acc|accuracy|top1|top_1|acc1|acc@1)(?:_|$)")
EVENT_FILE_RE = re.compile(r"events\.out\.tfevents\.")
EVENT_PID_RE = re.compile(r"^events\.out\.tfevents\.\d+\.[^/]*?\.(\d{1,9})\.\d+(?:\.[^/]*)?$")
"""``events.out.tfevents.TIME.HOST.PID.N``: TensorBoard names the writing process (torch's and
TensorFlow's writers alike)."""
RANK_IN_PATH_RE = re.compile(r"rank[_-]?(\d{1,6})(?!\d)")
EPOCHS_DONE = "epochs done"
"""Hugging Face's trainer state's ``epoch``, as read: the epochs done, not the epoch's index."""
MAX_FILES = 64
"""Logger files followed at most: a folder with thousands of them is not a logger's."""
MAX_DEPTH = 6
MAX_WALK = 2000
"""Folders listed in one walk at most: a logger writes within a few levels of the script."""
WALK_SHARE = 100.0
MAX_SCAN_S = 30.0
MAX_RECORD = 16 << 20
"""An event file's record longer than this is not a scalar's: the reader skips what it cannot hold."""


def metric_role(key: str) -> str | None:
    """What a metric's name says it is: ``loss`` (training), ``val_loss`` (validation or test),
    ``accuracy`` or ``val_accuracy``; None for the rest. Shared by progress bars and logger files."""
    k = key.lower().replace("-", "_").replace("/", "_").replace(" ", "_")
    if k in IGNORED:
        return None
    held_out = bool(HELD_OUT_RE.search(k))
    if "loss" in k:
        return "val_loss" if held_out else "loss"
    if ACCURACY_RE.search(k):
        return "val_accuracy" if held_out else "accuracy"
    return None


@dataclass
class Scalar:
    """One value a logger wrote: its name, the step it names, when, and which rank's folder held it."""

    tag: str
    step: int | None
    value: float
    time: float
    rank: int = 0


# -- TensorBoard event files -----------------------------------------------------------


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message: ints for varints, bytes for
    length-delimited fields, raw 4 or 8 bytes for fixed ones."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def _tensor_value(data: bytes) -> float | None:
    """A scalar TensorProto's value: float_val, double_val or its content as float32/float64."""
    dtype, content = 1, b""
    for number, wire, value in _fields(data):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 4 and wire == 2:
            content = value
        elif number == 5:  # float_val, packed or not
            return float(struct.unpack("<f", value[:4])[0])
        elif number == 6:  # double_val
            return float(struct.unpack("<d", value[:8])[0])
    if content and dtype == 1 and len(content) == 4:
        return float(struct.unpack("<f", content)[0])
    if content and dtype == 2 and len(content) == 8:
        return float(struct.unpack("<d", content)[0])
    return None


def event_scalars(record: bytes) -> Iterator[tuple[str, int, float, float]]:
    """(tag, step, value, wall time) of each scalar in one serialized ``Event``."""
    wall, step, summary = 0.0, 0, b""
    for number, wire, value in _fields(record):
        if number == 1 and wire == 1:
            wall = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            step = value
        elif number == 5 and wire == 2:
            summary = value
    for number, wire, value in _fields(summary):
        if number != 1 or wire != 2:
            continue
        tag, number_value = "", None
        for f, w, v in _fields(value):
            if f == 1 and w == 2:
                tag = v.decode(errors="replace")
            elif f == 2 and w == 5:
                number_value = float(struct.unpack("<f", v)[0])
            elif f == 8 and w == 2:
                number_value = _tensor_value(v)
        if tag and number_value is not None:
            yield tag, step, number_value, wall


class _EventFile:
    """An event file read as it grows: whole records only (a record half written is read next time)."""

    def __init__(self, path: str):
        self.path, self.offset = path, 0

    def read(self) -> list[tuple[str, int, float, float]]:
        out: list[tuple[str, int, float, float]] = []
        data = read_at_most(self.path, READ_PER_POLL, self.offset)
        i = 0
        while len(data) - i >= 12:
            (length,) = struct.unpack("<Q", data[i : i + 8])
            if length > MAX_RECORD:
                raise TooLarge(f"a record of {length:,} bytes is no scalar's")
            end = i + 12 + length + 4
            if end > len(data):
                break
            try:
                out += event_scalars(data[i + 12 : i + 12 + length])
            except (ValueError, IndexError, struct.error):
                pass  # a record of another kind: its scalars are not torchdeck's to read
            i = end
        self.offset += i
        return out


# -- the text formats ----------------------------------------------------------------------


class _AppendedLines:
    """MLflow's metric file (``timestamp value step`` per line), read as lines are appended."""

    def __init__(self, path: str, tag: str):
        self.path, self.tag, self.offset = path, tag, 0

    def read(self) -> list[tuple[str, int, float, float]]:
        data = read_at_most(self.path, READ_PER_POLL, self.offset)
        end = data.rfind(b"\n") + 1
        if not end and len(data) == READ_PER_POLL:
            raise TooLarge(f"a line of over {READ_PER_POLL:,} bytes is no metric's")
        self.offset += end
        out = []
        for line in data[:end].decode(errors="replace").splitlines():
            parts = line.split()
            try:
                out.append((self.tag, int(parts[2]) if len(parts) > 2 else 0, float(parts[1]), int(parts[0]) / 1000))
            except (IndexError, ValueError):
                continue
        return out


class _Rewritten:
    """A file a logger writes whole each time (Lightning's metrics.csv, Hugging Face's
    trainer_state.json): read again when it changes, its rows past those already read."""

    def __init__(self, path: str, history: set[tuple[str, int]] | None = None):
        self.path, self.seen, self.stamp = path, 0, (0.0, -1)
        self.resume_at: int | None = None
        """Where the trainer state's next history entry starts, once one was read."""
        self.totals: dict[str, int] = {}
        self.history = set() if history is None else history
        """The (name, step) points read from any of the run's trainer states: each checkpoint's
        ``checkpoint-N/trainer_state.json`` repeats the history before it."""

    def read(self) -> list[tuple[str, int, float, float]]:
        st = os.stat(self.path)
        if (st.st_mtime, st.st_size) == self.stamp:
            return []
        self.stamp = (st.st_mtime, st.st_size)
        if self.path.endswith(".json"):
            new = self._new_history()
        else:
            if st.st_size > MAX_REWRITTEN:
                raise TooLarge(f"it is {st.st_size:,} bytes, over the {MAX_REWRITTEN:,} read whole at each change")
            rows = self._rows(read_at_most(self.path, MAX_REWRITTEN).decode(errors="replace"))
            new, self.seen = rows[self.seen :], max(self.seen, len(rows))
        out: list[tuple[str, int, float, float]] = []
        for row in new:
            step = _int(row.get("step") if "step" in row else row.get("global_step")) or 0
            when = _float(row.get("time") or row.get("created_at")) or st.st_mtime
            if "train_runtime" in row:
                continue  # Hugging Face's figures for the whole run (its mean loss), not a step's
            for key, value in row.items():
                number = _float(value)
                if number is not None and key not in ("step", "global_step", "time", "created_at"):
                    if self.path.endswith(".json"):
                        key = EPOCHS_DONE if key == "epoch" else key
                        if (key, step) in self.history:
                            continue
                        self.history.add((key, step))
                    out.append((key, step, number, when))
        return out

    def _rows(self, text: str) -> list[dict[str, Any]]:
        try:
            return list(csv.DictReader(io.StringIO(text)))
        except csv.Error:
            return []

    def _new_history(self) -> list[dict[str, Any]]:
        """The entries of a trainer state's ``log_history`` past those read, parsed one at a time
        from where the last read stopped (the file is rewritten whole, its history only grows, so
        the bytes before stay where they were): a 20 MB state costs what its new entries cost."""
        with open_regular(self.path) as f:
            start = self.resume_at or _history_start(f)
            if start is None:
                return []  # written as it is read, or no history yet: the next change reads it
            entries, end = _entries_from(f, start)
            tail = _tail(f)
        for key, name in (("max_steps", "total_steps"), ("num_train_epochs", "epochs")):
            found = re.search(rb'"%s":\s*(\d+(?:\.\d+)?)' % key.encode(), tail)
            if found and float(found.group(1)) > 0:
                self.totals[name] = int(float(found.group(1)))
        if end is None and self.resume_at is not None:  # not the history's next entry there: read anew
            self.resume_at = None
            return self._new_history()
        self.resume_at = end
        return [e for e in entries if isinstance(e, dict)]


HISTORY_KEY_RE = re.compile(rb'"log_history"\s*:\s*\[')
CHUNK = 1 << 20
MAX_ENTRY = 1 << 20
"""Bytes of one logged entry of a trainer state at most: a logged step is a few hundred."""
MAX_REWRITTEN = 8 << 20
"""Bytes of a CSV read whole each time it changes (Lightning rewrites it): past it, a note."""
READ_PER_POLL = 16 << 20
"""Bytes of an appended file read in one poll: a reader far behind catches up in steps."""


def _history_start(f: IO[bytes]) -> int | None:
    """Where the first entry of the ``log_history`` array starts, from the file's head."""
    head = b""
    while len(head) < 64 * CHUNK:
        chunk = f.read(CHUNK)
        if not chunk:
            break
        head += chunk
        found = HISTORY_KEY_RE.search(head)
        if found:
            return found.end()
    return None


def _entries_from(f: IO[bytes], offset: int) -> tuple[list[object], int | None]:
    """The history's entries from ``offset`` (just past ``[`` or past the last entry read), and the
    offset after the last whole one; None for it where the bytes there are not the history's. An
    entry too deep for the parser, or past ``MAX_ENTRY``, is ``TooLarge``."""
    decoder, utf8 = json.JSONDecoder(), codecs.getincrementaldecoder("utf-8")("replace")
    f.seek(offset)
    text, base, last, eof = "", offset, 0, False
    entries: list[object] = []
    while True:
        i, n = last, len(text)
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i < n:
            if text[i] == "]":
                return entries, base + len(text[:last].encode())
            if text[i] != "{":
                return entries, None
            try:
                value, last = decoder.raw_decode(text, i)
                entries.append(value)
                continue
            except RecursionError:
                raise TooLarge("a history entry nested too deep to read") from None
            except ValueError:  # not whole yet: read on
                if n - i > MAX_ENTRY:
                    raise TooLarge(f"a history entry of over {MAX_ENTRY:,} bytes") from None
        if eof:  # the file ends inside the history: being written, read on at the next change
            return entries, base + len(text[:last].encode())
        chunk = f.read(CHUNK)
        eof = not chunk
        base, text, last = base + len(text[:last].encode()), text[last:], 0
        text += utf8.decode(chunk, final=eof)


def _tail(f: IO[bytes], size: int = 1 << 16) -> bytes:
    f.seek(0, os.SEEK_END)
    end = f.tell()
    f.seek(max(0, end - size))
    return f.read(size)


class TooLarge(ValueError):
    """A logger file this reader will not follow (a record, line or entry past its bounds)."""


SQL_DEADLINE_S = 1.0
"""How long one read of MLflow's store may run: its rows since the last poll take milliseconds."""


def quote_uri(path: str) -> str:
    """A path as SQLite's ``file:`` URI holds it (``?`` and ``#`` in a folder's name are no query)."""
    return path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")


MLFLOW_DB = "mlflow.db"
"""MLflow's default store since 3.x where SQLAlchemy is installed (``sqlite:///mlflow.db`` in the
script's folder); ``mlruns/`` otherwise."""


class _MlflowDatabase:
    """MLflow's SQLite store: its ``metrics`` table's rows logged since the run began, read by rowid
    as they are added (read-only; a write under way is read at the next poll)."""

    def __init__(self, path: str, since: float):
        self.path, self.since_ms, self.rowid = path, int((since - 1) * 1000), 0

    def read(self) -> list[tuple[str, int, float, float]]:
        try:
            import sqlite3
        except ImportError:  # a Python built without it (rare in images): the store goes unread
            return []
        with open_regular(self.path):  # a FIFO or a device is no database: not handed to SQLite
            pass
        deadline = time.monotonic() + SQL_DEADLINE_S
        try:
            # read-only, and no lock taken (immutable): the script's writes never wait for this reader
            db = sqlite3.connect(f"file:{quote_uri(self.path)}?mode=ro&immutable=1", uri=True, timeout=0.2)
            try:
                # a real deadline (the timeout above only bounds waiting for a lock): a ``metrics`` that
                # is a view over an endless query is interrupted, and the store not followed
                db.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
                kind = db.execute("SELECT type FROM sqlite_master WHERE name = 'metrics'").fetchone()
                if kind is not None and kind[0] != "table":
                    raise TooLarge(f"its metrics is a {kind[0]}, not MLflow's table")
                rows = db.execute(
                    "SELECT rowid, key, value, step, timestamp FROM metrics"
                    " WHERE rowid > ? AND timestamp >= ? AND is_nan = 0 ORDER BY rowid LIMIT 10000",
                    (self.rowid, self.since_ms),
                ).fetchall()
            finally:
                db.close()
        except sqlite3.OperationalError as exc:
            if "interrupted" in str(exc):
                raise TooLarge(f"a read of it ran past {SQL_DEADLINE_S:g} s") from None
            return []  # being written, or not MLflow's yet: the next poll reads it
        except sqlite3.Error:
            return []
        if rows:
            self.rowid = rows[-1][0]
        out = []
        for _, key, value, step, stamp in rows:
            number, at, when = _float(value), _int(step), _float(stamp)
            if number is not None:
                out.append((str(key), at or 0, number, (when or 0.0) / 1000))
        return out


def _float(value: object) -> float | None:
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _int(value: object) -> int | None:
    number = _float(value)
    return int(number) if number is not None else None


# -- following a folder --------------------------------------------------------------------


@dataclass
class LoggerFiles:
    """The logger files under ``root`` written since ``since`` (a run's start), followed: ``poll``
    returns the metric records their new scalars make, as rank ``rank``'s. ``tags`` maps a role
    (loss, val_loss, accuracy, val_accuracy) to the scalar's name where its name does not say
    (``metrics.tags``). Where each rank of a DDP script writes its own TensorBoard file, the file
    names its writer's process: with ``pid``, only that process's event files are followed (so each
    rank's wrapper reads its own rank's), and the files that name no process (CSV, MLflow, Hugging
    Face) only where ``shared`` (one rank follows them for the run)."""

    root: str
    since: float
    tags: Mapping[str, str] = field(default_factory=dict)
    rank: int = 0
    pid: int | None = None
    shared: bool = True
    files: dict[str, Any] = field(default_factory=dict)
    epochs: dict[int, float] = field(default_factory=dict)
    """Each rank's epoch, as its logger last gave it."""
    found_loss: bool = False
    """A logger file gave the training loss (the script's printed loss is then not a second curve)."""
    history: set[tuple[str, int]] = field(default_factory=set)
    """The points read from Hugging Face's trainer states (``_Rewritten.history``)."""
    notes: list[str] = field(default_factory=list)
    """Lines for the rank's log: a logger file left unfollowed, and why (the wrapper prints them)."""
    scanned: float = 0.0
    scan_every: float = 0.0
    """The folder is walked again after this long: a hundred times what the last walk took (to
    ``MAX_SCAN_S``), so a project's folder is walked at every poll and a run started in ``$HOME``
    spends at most a hundredth of a core walking it."""
    before: dict[str, float] = field(default_factory=dict)
    """The logger files there before this follower began, with when each last changed: a previous
    run's or a previous attempt's (their points were read then), followed only once they change."""

    def __post_init__(self) -> None:
        for path in self._candidates():
            try:
                self.before[path] = os.path.getmtime(path)
            except OSError:
                continue

    @classmethod
    def for_rank(cls, pid: int, root: str | None = None) -> LoggerFiles:
        """The follower for this rank (torchrun's ``RANK``), whose script runs as process ``pid`` in
        ``root`` (the current folder): its own TensorBoard files, and, for the first rank of the first
        node, the files that name no writer (the ranks share the folder). ``TORCHDECK_METRIC_TAGS``
        (the spec's ``metrics.tags``) and ``TORCHDECK_JOB_STARTED_AT`` come from the environment."""
        env = os.environ
        shared = env.get("LOCAL_RANK", "0") == "0" and env.get("GROUP_RANK", "0") == "0"
        try:
            rank = int(env.get("RANK", "0") or 0)
            since = float(env.get("TORCHDECK_JOB_STARTED_AT", "") or time.time())
            tags = json.loads(env.get("TORCHDECK_METRIC_TAGS", "") or "{}")
        except ValueError:
            rank, since, tags = 0, time.time(), {}
        return cls(root or os.getcwd(), since, tags if isinstance(tags, dict) else {}, rank, pid, shared)

    def role(self, tag: str) -> str | None:
        for role, name in self.tags.items():
            if tag == name:
                return role
        return metric_role(tag)

    def scan(self, now: float | None = None, *, whole: bool = False) -> None:
        """Find logger files new since the start: a few directory listings, at most ``MAX_WALK``, and
        not at every poll once a walk has found nothing new (``whole``: now, whatever the last found)."""
        now = time.monotonic() if now is None else now
        if not whole and now - self.scanned < self.scan_every:
            return
        self.scanned, began = now, time.monotonic()
        for path in self._candidates():
            if path in self.files or len(self.files) >= MAX_FILES:
                continue
            try:
                changed = os.path.getmtime(path)
            except OSError:
                continue
            if changed < self.since - 1 or self.before.get(path) == changed:
                continue  # a previous run's or attempt's, as it was
            name = os.path.basename(path)
            if EVENT_FILE_RE.match(name):
                writer = EVENT_PID_RE.search(name)
                if self.pid is not None and writer is not None and int(writer.group(1)) != self.pid:
                    continue  # another rank's writer
                if self.pid is not None and writer is None and not self.shared:
                    continue
                self.files[path] = _EventFile(path)
            elif not self.shared:
                continue
            elif name in ("metrics.csv", "trainer_state.json"):
                self.files[path] = _Rewritten(path, self.history)
            elif name == MLFLOW_DB:
                self.files[path] = _MlflowDatabase(path, self.since)
            else:
                tag = path.split(os.sep + "metrics" + os.sep, 1)[1].replace(os.sep, "/")
                self.files[path] = _AppendedLines(path, tag)

        self.scan_every = min(MAX_SCAN_S, WALK_SHARE * (time.monotonic() - began))

    def take_notes(self) -> bytes:
        """The notes not yet said, as lines for the rank's log (its wrapper writes them there)."""
        said, self.notes[:] = "".join(f"{note}\n" for note in self.notes), []
        return said.encode(errors="replace")

    def _candidates(self) -> Iterator[str]:
        root_depth = self.root.rstrip(os.sep).count(os.sep)
        for walked, (folder, dirs, names) in enumerate(os.walk(self.root)):
            if walked >= MAX_WALK:
                return
            depth = folder.count(os.sep) - root_depth
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules")]
            if depth >= MAX_DEPTH + (2 if "mlruns" in folder else 0):
                dirs[:] = []
            for name in names:
                if EVENT_FILE_RE.match(name) or name in ("metrics.csv", "trainer_state.json", MLFLOW_DB):
                    yield os.path.join(folder, name)
                elif (os.sep + "mlruns" + os.sep) in folder + os.sep and (os.sep + "metrics") in folder:
                    yield os.path.join(folder, name)

    def poll(self, now: float | None = None, *, last: bool = False) -> list[dict[str, Any]]:
        """The records the followed files' new scalars make, oldest first. A file that cannot be read
        now (gone, being written) is read at the next poll; one that no reader here can follow (a
        FIFO, an entry nested 200,000 deep, a query that never ends: anything it raises) is left,
        with one line in ``notes`` saying why, and the others still followed. ``last``: the script has
        ended, and the folder is walked once more for what its loggers wrote as they closed."""
        self.scan(now, whole=last)
        records: list[dict[str, Any]] = []
        for path, reader in list(self.files.items()):
            try:
                scalars = reader.read()
            except FileNotFoundError:
                continue
            except Exception as exc:  # noqa: BLE001 - beside the user's code, nothing may stop the wrapper
                self.files[path] = _Left()
                why = (
                    f"it is {exc.kind}"
                    if isinstance(exc, NotRegularFile)
                    else exc.strerror or str(exc)
                    if isinstance(exc, OSError)
                    else str(exc)
                    if isinstance(exc, TooLarge)
                    else f"{type(exc).__name__}: {exc}"
                )
                self.notes.append(f"torchdeck: not following {path}: {why[:300]}"[:400])
                continue
            rank = int(m.group(1)) if (m := RANK_IN_PATH_RE.search(path[len(self.root) :])) else self.rank
            records += self._records(scalars, rank, getattr(reader, "totals", {}))
        return records

    def _records(
        self, scalars: list[tuple[str, int, float, float]], rank: int, totals: Mapping[str, int]
    ) -> list[dict[str, Any]]:
        by_step: dict[tuple[int, str], dict[str, Any]] = {}
        for tag, step, value, wall in scalars:
            if tag.lower() in ("epoch", "train/epoch", EPOCHS_DONE):
                # Lightning logs the epoch's index; Hugging Face the epochs done (0.2, ..., 1.0 as the
                # first ends, in its trainer state and as ``train/epoch``): the index is one less
                done = tag.lower() != "epoch"
                self.epochs[rank] = max(0.0, math.ceil(value) - 1.0) if done else value
                continue
            if not math.isfinite(value):
                continue  # a diverged loss: JSON has no NaN, and the curve's gap says it
            role = self.role(tag)
            if role is None or (role == "accuracy" and "train" in tag.lower()):
                continue  # a training accuracy is no evaluation
            event = "step" if role == "loss" else "eval"
            record = by_step.setdefault(
                (step or 0, event),
                {"schema": 1, "event": event, "rank": rank, "time": wall or time.time(), "step": step or 0,
                 "source": "logger"},
            )  # fmt: skip
            record["accuracy" if role in ("accuracy", "val_accuracy") else role] = value
            if role == "loss":
                self.found_loss = True
            if rank in self.epochs:  # epochs done (Hugging Face's 2.0 at the end): the epoch's index
                epochs = totals.get("epochs")
                record["epoch"] = min(int(self.epochs[rank]), epochs - 1) if epochs else int(self.epochs[rank])
            for name, total in totals.items():
                record[name] = total
        return sorted(by_step.values(), key=lambda r: (r["step"], r["event"] != "step"))


class _Left:
    """A logger file no longer followed (``LoggerFiles.notes`` says why)."""

    def read(self) -> list[tuple[str, int, float, float]]:
        return []
