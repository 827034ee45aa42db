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
from typing import Any

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
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        i = 0
        while len(data) - i >= 12:
            (length,) = struct.unpack("<Q", data[i : i + 8])
            if length > MAX_RECORD:
                self.offset = os.path.getsize(self.path)  # not a file this reader can follow
                return out
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
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
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
        self.totals: dict[str, int] = {}
        self.history = set() if history is None else history
        """The (name, step) points read from any of the run's trainer states: each checkpoint's
        ``checkpoint-N/trainer_state.json`` repeats the history before it."""

    def read(self) -> list[tuple[str, int, float, float]]:
        st = os.stat(self.path)
        if (st.st_mtime, st.st_size) == self.stamp:
            return []
        self.stamp = (st.st_mtime, st.st_size)
        with open(self.path, encoding="utf-8", errors="replace") as f:
            text = f.read(8 << 20)
        rows = self._rows(text)
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
        if self.path.endswith(".json"):
            try:
                state = json.loads(text)
            except ValueError:
                return []  # written as it is read: the next change reads it whole
            if not isinstance(state, dict):
                return []
            for key, name in (("max_steps", "total_steps"), ("num_train_epochs", "epochs")):
                if isinstance(state.get(key), (int, float)) and state[key] > 0:
                    self.totals[name] = int(state[key])
            history = state.get("log_history")
            return [r for r in history if isinstance(r, dict)] if isinstance(history, list) else []
        try:
            return list(csv.DictReader(io.StringIO(text)))
        except csv.Error:
            return []


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
        try:
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=0.2)
            try:
                rows = db.execute(
                    "SELECT rowid, key, value, step, timestamp FROM metrics"
                    " WHERE rowid > ? AND timestamp >= ? AND is_nan = 0 ORDER BY rowid LIMIT 10000",
                    (self.rowid, self.since_ms),
                ).fetchall()
            finally:
                db.close()
        except sqlite3.Error:  # being written, or not MLflow's yet: the next poll reads it
            return []
        if rows:
            self.rowid = rows[-1][0]
        return [(str(key), int(step or 0), float(value), int(stamp) / 1000) for _, key, value, step, stamp in rows]


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

    def scan(self) -> None:
        """Find logger files new since the start (cheap: a few directory listings)."""
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

    def _candidates(self) -> Iterator[str]:
        root_depth = self.root.rstrip(os.sep).count(os.sep)
        for folder, dirs, names in os.walk(self.root):
            depth = folder.count(os.sep) - root_depth
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules")]
            if depth >= MAX_DEPTH + (2 if "mlruns" in folder else 0):
                dirs[:] = []
            for name in names:
                if EVENT_FILE_RE.match(name) or name in ("metrics.csv", "trainer_state.json", MLFLOW_DB):
                    yield os.path.join(folder, name)
                elif (os.sep + "mlruns" + os.sep) in folder + os.sep and (os.sep + "metrics") in folder:
                    yield os.path.join(folder, name)

    def poll(self, now: float | None = None) -> list[dict[str, Any]]:
        """The records the followed files' new scalars make, oldest first."""
        self.scan()
        records: list[dict[str, Any]] = []
        for path, reader in list(self.files.items()):
            try:
                scalars = reader.read()
            except OSError:
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
