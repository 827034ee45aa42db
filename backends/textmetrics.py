"""Metrics from any training script's output: a rank's lines become schema-1
metric records (``torchdeck.trainer.metrics``), so the monitor, ``jobs``,
``status`` and ``train`` show user code as they show the built-in trainer.

- schema-1 JSON lines (the reporting helper, ``torchdeck.report``) pass
  through as they are;
- text in the common formats is recognised: ``loss: 1.23``, ``loss=1.23``,
  ``Loss 1.2345e+00 (1.3e+00)``, ``| loss  7.63 |``, ``train_loss 1.2``,
  ``'loss': 0.3``, with ``step/iter/batch N[/M]``, ``epoch N[/M]``,
  ``acc/accuracy/Acc@1/top1 X[%]`` and ``X samples/s`` where the line has them;
- a spec's ``metrics.pattern`` (a regular expression with named groups
  among ``PATTERN_GROUPS``) replaces the built-in formats. It is the user's,
  so it runs on RE2 (google-re2), whose matching is linear in the line: a
  pattern such as ``(a+)+b`` took Python's engine seconds per line, and
  would have stalled the metric reader for every rank.

A line with a loss is a ``step``; a line with an accuracy and no loss is an
``eval``. Where a line has no step number, a rank's loss lines are counted.
Standard library only, but for RE2 where a pattern is given: it runs beside
the user's code and in the console's metric reader."""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Mapping
from typing import Any, Protocol

MAX_LINE = 2000
"""Characters of a line that are looked at: a bound on the work a pattern can do per line."""
MAX_JSON_LINE = 64 * 1024
"""Bytes of a line that may be a schema-1 JSON record; longer lines are text (a record is ~200)."""
MAX_RANKS = 1 << 16
"""Ranks a run's text may name where its world size is not known: a line claiming rank 10**9 must
not make a parser for it."""
PATTERN_GROUPS = ("loss", "step", "total_steps", "epoch", "epochs", "accuracy", "samples_per_s")

# The built-in formats are searched with Python's engine in every rank's reader, beside the user's
# code (where RE2 may be missing), so each is written to match in linear time: no two quantifiers
# side by side that can take the same characters (``\s*[:=]?\s*\|?\s*`` made ``loss`` and 800
# spaces take 6 s, 2,000 spaces 80 s), one class for the separators instead, and every count that
# becomes an int bounded in digits (``epoch`` and 400 digits was an OverflowError).
_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
_INT = r"(\d{1,12})(?!\d)"
LOSS_RE = re.compile(r"(?<![A-Za-z_])(?:train[_ ])?loss['\"]?[\s:=|]*" + _NUM, re.IGNORECASE)
STEP_RE = re.compile(
    r"(?<![A-Za-z_/])(?:global[_ ])?(?:step|iter(?:ation)?|batch)['\"]?[\s:=#\[]*" + _INT + r"(?:\s*/\s*" + _INT + ")?",
    re.IGNORECASE,
)
EPOCH_BATCH_RE = re.compile(
    r"epoch[\s:]*\[\s*\d{1,9}\s*\]\s*\[\s*" + _INT + r"\s*/\s*" + _INT + r"\s*\]", re.IGNORECASE
)
"""``Epoch: [3][120/391]`` (torchvision's reference scripts): the batch within the epoch."""
EPOCH_RE = re.compile(
    r"(?<![A-Za-z_])epoch['\"]?[\s:=#\[]*(\d{1,9}(?:\.\d{1,6})?)(?!\d)(?:\s*/\s*" + _INT + ")?", re.IGNORECASE
)
ACC_RE = re.compile(
    r"(?<![A-Za-z_])(?:val[_ ]|test[_ ]|eval[_ ])?(?:acc(?:uracy)?(?:@1)?|top-?1(?:[_ ]acc)?)['\"]?[\s:=]*"
    r"([-+]?\d+(?:\.\d+)?)\s*(%?)",
    re.IGNORECASE,
)
SPEED_RE = re.compile(
    r"(?<![\d.])([-+]?\d+(?:\.\d+)?)\s*(?:samples|images|imgs|img|examples|ex)\s*/\s*s(?:ec)?\b"
    r"|(?:samples|images|img|examples)[_ ]?(?:per[_ ]?s(?:ec(?:ond)?)?|/s)['\"]?[\s:=]*([-+]?\d+(?:\.\d+)?)",
    re.IGNORECASE,
)


TUTORIAL_RE = re.compile(r"^\s*\[\s*(\d{1,9})\s*,\s*\d+\s*\]")
"""``[1,   200] loss: 2.335`` (PyTorch's CIFAR-10 tutorial and the EKS workshop's script): the epoch,
then the batch within it (the step is counted)."""
SPEED_WORDS = ("sampl", "imag", "img", "exampl", "ex/s", "ex /")


class PatternMatch(Protocol):
    """What torchdeck reads of a match of a user's pattern (RE2's match, as ``re``'s)."""

    def groupdict(self) -> dict[str, str | None]: ...


class UserPattern(Protocol):
    """A user's compiled pattern (RE2's, which has no type stubs), as torchdeck uses it."""

    groupindex: Mapping[str, int]

    def search(self, text: str) -> PatternMatch | None: ...


@functools.lru_cache(maxsize=32)
def compile_pattern(pattern: str) -> UserPattern:
    """The user's pattern on RE2 (linear-time matching, no look-around or back-references);
    raises ValueError with RE2's reason. Compiled once per pattern, however many ranks' parsers
    (and checks) ask: RE2's compiled patterns are safe to share between threads."""
    import re2

    options = re2.Options()
    options.log_errors = False  # RE2 would print its reason to stderr, under the console
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        reason = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        raise ValueError(reason) from None


def check_pattern(pattern: object) -> str | None:
    """Why ``pattern`` cannot be a metrics pattern, or None where it can."""
    if not isinstance(pattern, str) or not pattern:
        return "must be a regular expression with named groups, e.g. 'it (?P<step>\\d+) L=(?P<loss>[\\d.]+)'"
    if len(pattern) > 1000:
        return f"is {len(pattern)} characters; at most 1000"
    try:
        compiled = compile_pattern(pattern)
    except ValueError as exc:
        return (
            f"is not a regular expression RE2 takes ({exc}); patterns match in linear time, "
            "so look-around and back-references are out"
        )
    names = set(compiled.groupindex)
    unknown = sorted(names - set(PATTERN_GROUPS))
    if unknown:
        return f"has groups torchdeck does not know: {', '.join(unknown)} (known: {', '.join(PATTERN_GROUPS)})"
    if not names & {"loss", "accuracy"}:
        return "needs a (?P<loss>...) or (?P<accuracy>...) group"
    return None


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None  # JSON has no NaN: null


class TextMetrics:
    """One rank's output lines, in order, to metric records."""

    def __init__(self, rank: int, world_size: int = 0, pattern: str | None = None):
        self.rank, self.world_size = rank, world_size
        # every pattern passes the spec's check here, where it is used: one read back from a job's
        # annotation on a cluster may have been written by anyone (RE2's refusal was a traceback)
        self.pattern_problem = check_pattern(pattern) if pattern else None
        """Why the given pattern is not used (the built-in formats are, instead); None where it is."""
        self.pattern = compile_pattern(pattern) if pattern and self.pattern_problem is None else None
        self.count = 0  # loss lines seen (the step where a line has none)
        self.epoch: float | None = None
        self.step = 0

    def record(self, event: str, *, now: float | None = None, **fields: object) -> dict[str, Any]:
        """A schema-1 record of this rank where its output has got to (step, epoch), with ``fields``."""
        return {
            "schema": 1,
            "event": event,
            "rank": self.rank,
            "time": time.time() if now is None else now,
            "step": self.step,
            "epoch": int(self.epoch) if self.epoch is not None else None,
            **fields,
        }

    def feed(self, line: str, now: float | None = None) -> dict[str, Any] | None:
        """The record this line carries, or None for a line without metrics. Never raises: a line
        that a pattern cannot make sense of is a line without metrics, and the next is read."""
        try:
            return self._feed(line, now)
        except Exception:  # noqa: BLE001 - one odd line must not end the rank's reader
            return None

    def _feed(self, line: str, now: float | None) -> dict[str, Any] | None:
        stripped = line.strip()
        if stripped.startswith("{") and len(stripped) <= MAX_JSON_LINE:
            try:
                given = json.loads(stripped)
            except (ValueError, RecursionError):
                given = None
            if isinstance(given, dict) and given.get("schema") == 1 and "event" in given:
                given.setdefault("rank", self.rank)
                return given
        text = line[:MAX_LINE]
        found = self._match_pattern(text) if self.pattern else self._match_builtin(text)
        if found is None:
            return None
        loss, accuracy = found.get("loss"), found.get("accuracy")
        if found.get("epoch") is not None:
            self.epoch = found["epoch"]
        event = "step" if "loss" in found else "eval"
        if event == "step":
            self.count += 1
            step = found.get("step")
            self.step = int(step) if step is not None else self.count
        record = self.record(event, now=now, source="text")
        if self.world_size:
            record["world_size"] = self.world_size
        if event == "step":
            record["loss"] = loss
            record["samples_per_s"] = found.get("samples_per_s")
            if found.get("total_steps"):
                record["total_steps"] = int(found["total_steps"])
        if accuracy is not None:
            record["accuracy"] = accuracy
        if found.get("epochs"):
            record["epochs"] = int(found["epochs"])
        return record

    def _match_pattern(self, text: str) -> dict[str, Any] | None:
        assert self.pattern is not None
        m = self.pattern.search(text)
        if m is None:
            return None
        found: dict[str, Any] = {}
        for name, value in m.groupdict().items():
            if value is not None:
                number = _number(value.rstrip("%"))
                if name == "accuracy" and number is not None and (value.endswith("%") or number > 1):
                    number /= 100
                found[name] = number
        if "loss" not in found and found.get("accuracy") is None:
            return None
        return found

    def _match_builtin(self, text: str) -> dict[str, Any] | None:
        found: dict[str, Any] = {}
        lower = text.lower()
        if "loss" in lower:
            m = LOSS_RE.search(text)
            if m:
                found["loss"] = _number(m.group(1))
        if "acc" in lower or "top" in lower:
            m = ACC_RE.search(text)
            value = _number(m.group(1)) if m else None
            if m and value is not None:
                found["accuracy"] = value / 100 if m.group(2) or value > 1 else value
        if not found:
            return None
        # each pattern only where its word is: a search costs microseconds, a substring test far less
        m = STEP_RE.search(text) if "step" in lower or "iter" in lower or "batch" in lower else None
        m = m or (EPOCH_BATCH_RE.search(text) if "epoch" in lower else None)
        if m:
            found["step"] = int(m.group(1))
            if m.group(2):
                found["total_steps"] = int(m.group(2))
        m = EPOCH_RE.search(text) if "epoch" in lower else None
        if m:
            found["epoch"] = float(m.group(1))
            if m.group(2):
                found["epochs"] = int(m.group(2))
        elif text[:1] in "[ " and (m := TUTORIAL_RE.match(text)):
            found["epoch"] = float(m.group(1))
        m = SPEED_RE.search(text) if any(w in lower for w in SPEED_WORDS) else None
        if m:
            found["samples_per_s"] = _number(m.group(1) or m.group(2))
        return found


MODULE_HINT = (
    "install the package in the environment that runs the script (locally), or add it to the code folder's "
    "requirements.txt (entrypoint.requirements) or the image (clusters)"
)


def exception_of(line: str) -> dict[str, str] | None:
    """A Python traceback's last line as an error's message and hint (None: not such a line)."""
    head = line.split(":", 1)[0].strip()
    if not head.endswith(("Error", "Exception", "Interrupt")) or " " in head or line[:1].isspace():
        return None
    if head.rsplit(".", 1)[-1] == "ModuleNotFoundError":
        return {"message": line.strip(), "hint": MODULE_HINT}
    return {"message": line.strip(), "hint": "the rank's log has the whole traceback"}


RANK_PREFIX_RE = re.compile(rb"^\[(?:rank(\d{1,7})|[A-Za-z_]{0,32}?(\d{1,7}))\]:")
"""torchrun's per-line prefix: ``[rank3]:`` (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, which torchdeck
sets for user code on clusters) or ``[default1]:`` (its own --tee prefix: the local rank)."""


class RankedText:
    """The lines of a run's pod logs, where every rank's output shares a stream: each line's
    rank from its prefix (else the node's first rank), and the metric records it brings, each
    rank's lines read in order by its own ``TextMetrics`` (a rank's first line brings its start)."""

    def __init__(self, nproc_per_node: int, world_size: int = 0, pattern: str | None = None, program: str = ""):
        self.nproc, self.world_size, self.pattern = max(1, nproc_per_node), world_size, pattern
        self.program = program
        self.ranks: dict[int, TextMetrics] = {}
        self.tracebacks: set[int] = set()
        """Ranks whose output is inside a Python traceback (its last line is the error)."""

    def read(self, node: int, raw: bytes, now: float | None = None) -> tuple[int, bytes, list[dict[str, Any]]]:
        """(rank, the line without its prefix, its records); node -1 (mpirun's launcher, or
        torchdeck's own notes) gives rank -1 unless the line says its rank."""
        rank = node * self.nproc if node >= 0 else -1
        m = RANK_PREFIX_RE.match(raw)
        if m:
            said = (
                int(m.group(1)) if m.group(1) is not None else node * self.nproc + int(m.group(2)) if node >= 0 else -1
            )
            if 0 <= said < (self.world_size or MAX_RANKS):  # a prefix beyond the world is the line's text
                raw, rank = raw[m.end() :], said
            elif said < 0:
                raw = raw[m.end() :]
        if rank < 0:
            return rank, raw, []
        records = []
        parser = self.ranks.get(rank)
        if parser is None:
            parser = self.ranks[rank] = TextMetrics(rank, self.world_size, self.pattern)
            start = {"schema": 1, "event": "start", "rank": rank, "world_size": self.world_size,
                     "model": self.program, "time": time.time() if now is None else now}  # fmt: skip
            records.append(start)
        text = raw.decode(errors="replace")
        if rank in self.tracebacks and (error := exception_of(text)) is not None:
            self.tracebacks.discard(rank)
            records.append(parser.record("error", now=now, **error))
            return rank, raw, records
        if text.startswith("Traceback (most recent call last)"):
            self.tracebacks.add(rank)
        record = parser.feed(text, now)
        if record is not None:
            records.append(record)
        return rank, raw, records
