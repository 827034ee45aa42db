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
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from torchdeck.trainer.logfiles import metric_role

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


VAL_LOSS_RE = re.compile(
    r"(?<![A-Za-z])(val|valid|validation|test|eval|evaluation|dev)[_ ]loss['\"]?[\s:=|]*" + _NUM, re.IGNORECASE
)
"""``val_loss=0.3``, ``test loss: 6.6e-05``: a series of its own, never the training loss."""
HELD_OUT_BEFORE_RE = re.compile(r"(?:^|[^A-Za-z])(?:val|valid|validation|test|eval|evaluation|dev)[\s_:]{0,3}\Z", re.I)
"""The word just before a ``loss`` that makes it a held-out loss (``Validation loss: 0.4``)."""
BATCHES_RE = re.compile(
    r"(?<![\w.])" + _INT + r"(?:\s{0,3}/\s{0,3}" + _INT + r")?\s{1,3}(?:batches|batch|steps|iters|iterations)\b",
    re.IGNORECASE,
)
"""``after 409 batches``, ``20/ 310 batches``: a count before its word."""
MARKER_RE = re.compile(
    r"^[\W_]{0,8}(?:global[_ ])?(?:step|iter(?:ation)?)[\W_]{0,4}"
    + _INT
    + r"(?:\s{0,3}/\s{0,3}"
    + _INT
    + r")?[\W_]{0,4}\Z",
    re.IGNORECASE,
)
"""A line that is only a step's number (``STEP: 0``, ``iter 12/100``): a step marker. Once a script
prints one, it counts the steps, and the loss lines after it (an optimiser's closure prints one per
evaluation) belong to that step."""
BAR_RE = re.compile(r"(?<![\d.])(\d{1,12})(?:/(\d{1,12})|it)\s{0,3}\[([^\[\]]{0,600})\]")
"""A tqdm-style bar's counter and its bracket: ``152/152 [01:17<00:00, 1.97it/s, train_loss=7.86]``
(or ``35it [00:01, 20.5it/s]`` without a total); Lightning, Hugging Face, timm and rich print it."""
RICH_BAR_RE = re.compile(r"(?<![\d.])(\d{1,12})/(\d{1,12})\s{1,3}(?:\d{1,3}:)?\d{1,2}:\d\d\s{0,3}\u2022")
"""Lightning's rich bar: ``Epoch 1/4 ━━━━ 10/10 0:00:01 • 0:00:00 31.2it/s v_num: 0 train_loss: 0.14``;
its ``Epoch k/M`` counts to the last epoch's index (M is max_epochs - 1)."""
RICH_PAIR_RE = re.compile(r"(?:^|\s)([A-Za-z_][\w/.-]{0,60}):\s{0,2}" + _NUM + r"(?![\w.])")
RICH_RATE_RE = re.compile(r"(?<![\d.])(\d{1,9}(?:\.\d{1,6})?)\s?(it/s|s/it)")
RATE_RE = re.compile(r"^\s{0,3}(\d{1,9}(?:\.\d{1,6})?)\s?(it/s|s/it)\s{0,3}$")
PAIR_RE = re.compile(r"(?:^|[\s,])([A-Za-z_][\w/.-]{0,60})=\s{0,2}" + _NUM + r"(?![\w.])")
"""A bar's postfix item, ``train_loss=7.860``."""
HELD_OUT_BAR_RE = re.compile(r"valid|val\b|test|sanity|predict|eval", re.IGNORECASE)
"""A bar's description that makes it a validation pass, whose counter is not the training step."""
ANSI_RE = re.compile(r"\x1b(?:\[[0-9;?]{0,32}[ -/]{0,4}[@-~]|\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)|[@-Z\\-_])")
"""Colour and cursor codes (rich's and tqdm's bars move the cursor): dropped before reading."""
UPDATES_KEPT = 20
"""Updates of a rewritten line read where they arrive together (a bar's epoch, on a cluster): that
many spread over them, and the last."""


def _loss_rank(key: str) -> int:
    """Which training loss a bar's postfix means first: the step's over an epoch's mean."""
    k = key.lower()
    return 0 if k.endswith("_step") or k in ("loss", "train_loss") else 2 if k.endswith("_epoch") else 1


def updates_in(line: str) -> list[str]:
    """The states of a line rewritten in place with ``\r``, in order, colour codes dropped: all of them
    where few, else ``UPDATES_KEPT`` spread over them and the last."""
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
    if "\r" not in line:
        return [line]
    parts = [part for part in line.split("\r") if part.strip()]
    if len(parts) <= UPDATES_KEPT + 1:
        return parts
    stride = len(parts) / UPDATES_KEPT
    return [parts[int(i * stride)] for i in range(UPDATES_KEPT)] + [parts[-1]]


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
        self.count = 0  # loss lines seen (the step where a line has none and the script marks none)
        self.epoch: float | None = None
        self.step = 0
        self.marker: int | None = None
        """The step the script last marked on a line of its own (None: it marks none)."""
        self.marker_used = False
        self.marker_total: int | None = None
        self.loss_elsewhere = False
        """A logger file gives this rank's training loss: its printed losses are not a second curve."""
        self.epoch_base: int | None = None
        """Whether the script counts epochs from 0 or 1 (from the first it names): where a bar restarts
        each epoch, the global step is ``(epoch - base) * steps per epoch + batch``."""

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
        if "\x1b" in text:
            text = ANSI_RE.sub("", text)
        found = self._match_pattern(text) if self.pattern else self._match_builtin(text)
        if found is None:
            return None
        if "marker" in found:
            self.marker, self.marker_used = int(found["marker"]), False
            self.marker_total = found.get("total_steps") or self.marker_total
            return None
        if found.get("epoch") is not None:
            self.epoch = found["epoch"]
        event = "step" if "loss" in found or found.get("progress") else "eval"
        if event == "step":
            self.count += 1
            step = self._global_step(found)
            if step is None and self.marker is not None:
                if self.marker_used:  # a closure's further loss lines: the step's first one stands
                    return None
                step, self.marker_used = self.marker, True
                found.setdefault("total_steps", self.marker_total)
            self.step = step if step is not None else self.count
        record = self.record(event, now=now, source="text")
        if self.world_size:
            record["world_size"] = self.world_size
        if event == "step":
            record["loss"] = None if self.loss_elsewhere else found.get("loss")
            record["samples_per_s"] = found.get("samples_per_s")
            if found.get("steps_per_s") is not None:
                record["steps_per_s"] = found["steps_per_s"]
            if found.get("total_steps"):
                record["total_steps"] = int(found["total_steps"])
            if found.get("epoch_steps"):
                record["epoch_steps"] = int(found["epoch_steps"])
        for key in ("accuracy", "val_loss"):
            if found.get(key) is not None:
                record[key] = found[key]
        if found.get("epochs"):
            record["epochs"] = int(found["epochs"])
        return record

    def _global_step(self, found: dict[str, Any]) -> int | None:
        """The run's step from what the line says: a global step as it is; a batch within an epoch
        (a bar that restarts each epoch, ``Epoch: [3][120/391]``, ``20/ 310 batches``) as
        ``(epoch - base) * steps per epoch + batch``, where the epoch is known."""
        batch, per = found.get("batch"), found.get("epoch_steps")
        if batch is None:
            step = found.get("step")
            return int(step) if step is not None else None
        if not per or self.epoch is None:
            if per:
                found["total_steps"] = per
            return int(batch)
        if self.epoch_base is None:  # a script that prints "epoch 1" first counts from 1; bars count from 0
            self.epoch_base = 1 if self.epoch == 1 and not found.get("progress") else 0
        if found.get("epochs"):
            found["total_steps"] = int(found["epochs"]) * int(per)
        return max(0, int(self.epoch) - self.epoch_base) * int(per) + int(batch)

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
        bar = BAR_RE.search(text) if "[" in text else None
        if bar:
            self._read_bar(text, bar, found)
        elif "\u2022" in text and (rich := RICH_BAR_RE.search(text)):
            bar = rich
            self._read_rich_bar(text, rich, found)
        if "loss" in lower:
            if "loss" not in found and (loss := _training_loss(text)) is not None:
                found["loss"] = loss
            if "val_loss" not in found and (m := VAL_LOSS_RE.search(text)):
                found["val_loss"] = _number(m.group(2))
        if ("acc" in lower or "top" in lower) and "accuracy" not in found:
            m = ACC_RE.search(text)
            value = _number(m.group(1)) if m else None
            if m and value is not None:
                found["accuracy"] = value / 100 if m.group(2) or value > 1 else value
        if not found:
            if ("step" in lower or "iter" in lower) and (m := MARKER_RE.match(text.strip())):
                return {"marker": int(m.group(1)), "total_steps": int(m.group(2)) if m.group(2) else None}
            return None
        if bar and found.get("progress"):
            return found
        # each pattern only where its word is: a search costs microseconds, a substring test far less
        words = "step" in lower or "iter" in lower or "batch" in lower
        m = STEP_RE.search(text) if words else None
        m = m or (EPOCH_BATCH_RE.search(text) if "epoch" in lower else None)
        if m:
            found["step"] = int(m.group(1))
            if m.group(2):
                found["total_steps"] = int(m.group(2))
        elif words and (m := BATCHES_RE.search(text)):
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
        if found.get("epoch") is not None and "total_steps" in found and _per_epoch(text):
            found["batch"], found["epoch_steps"] = found.pop("step"), found.pop("total_steps")
        m = SPEED_RE.search(text) if any(w in lower for w in SPEED_WORDS) else None
        if m:
            found["samples_per_s"] = _number(m.group(1) or m.group(2))
        return found

    def _read_bar(self, text: str, bar: re.Match[str], found: dict[str, Any]) -> None:
        """A progress bar's state: its counter (the step, or the batch within an epoch where the bar
        names one, ``Epoch 2``), its rate (it/s), and the metrics of its postfix by their names; a
        validation bar's counter is no training step."""
        prefix, inside = text[: bar.start()], bar.group(3)
        held_out = HELD_OUT_BAR_RE.search(prefix) is not None
        for item in inside.split(",")[1:3] if not held_out else ():
            if m := RATE_RE.match(item):
                rate = float(m.group(1))
                found["steps_per_s"] = rate if m.group(2) == "it/s" else (1 / rate if rate else None)
        _postfix(PAIR_RE.findall(inside), found, held_out)
        if held_out:
            return
        found["progress"] = True
        n, total = int(bar.group(1)), int(bar.group(2)) if bar.group(2) else None
        m = EPOCH_RE.search(prefix) if "epoch" in prefix.lower() else None
        if m:
            found["epoch"] = float(m.group(1))
            if m.group(2):
                found["epochs"] = int(m.group(2))
            found["batch"], found["epoch_steps"] = n, total
        else:
            found["step"], found["total_steps"] = n, total

    def _read_rich_bar(self, text: str, bar: re.Match[str], found: dict[str, Any]) -> None:
        """Lightning's rich bar, read as its tqdm bar is: the batch within the epoch it names, its
        rate, and its ``key: value`` metrics."""
        prefix, rest = text[: bar.start()], text[bar.end() :]
        held_out = HELD_OUT_BAR_RE.search(prefix) is not None
        _postfix(RICH_PAIR_RE.findall(rest), found, held_out)
        if held_out:
            return
        if m := RICH_RATE_RE.search(rest):
            rate = float(m.group(1))
            found["steps_per_s"] = rate if m.group(2) == "it/s" else (1 / rate if rate else None)
        found["progress"] = True
        n, total = int(bar.group(1)), int(bar.group(2))
        epochs = _rich_epochs(prefix)
        if epochs:
            found.update(epochs)
            found["batch"], found["epoch_steps"] = n, total
        else:
            found["step"], found["total_steps"] = n, total


def _rich_epochs(text: str) -> dict[str, Any]:
    m = EPOCH_RE.search(text) if "epoch" in text.lower() else None
    if m is None:
        return {}
    out: dict[str, Any] = {"epoch": float(m.group(1))}
    if m.group(2):
        out["epochs"] = int(m.group(2)) + 1  # ``Epoch 1/1``: the last epoch's index
    return out


def _postfix(pairs: list[tuple[str, str]], found: dict[str, Any], held_out: bool) -> None:
    """A bar's named metrics: the training loss (the step's before an epoch's mean) and the
    held-out ones, by their names (``v_num`` and the like ignored)."""
    losses: list[tuple[int, float]] = []
    for key, value in pairs:
        role, number = metric_role(key), _number(value)
        if role is None or number is None:
            continue
        if role == "loss":
            losses.append((_loss_rank(key), number))
        elif role in ("val_loss", "val_accuracy"):
            found.setdefault("accuracy" if role == "val_accuracy" else role, number)
    if losses and not held_out:
        found["loss"] = min(losses)[1]


def _training_loss(text: str) -> float | None:
    """The first loss on the line that is not a held-out one (``test loss: 6.6e-05`` is not)."""
    start = 0
    for _ in range(4):
        m = LOSS_RE.search(text, start)
        if m is None:
            return None
        if not HELD_OUT_BEFORE_RE.search(text[max(0, m.start() - 14) : m.start()]):
            return _number(m.group(1))
        start = m.end()
    return None


def _per_epoch(text: str) -> bool:
    """Whether a line's ``N/M`` counts within an epoch: ``Epoch: [3][120/391]``, ``20/ 310 batches``."""
    lower = text.lower()
    return EPOCH_BATCH_RE.search(text) is not None or ("batch" in lower and BATCHES_RE.search(text) is not None)


class Rewrites:
    """A rank's raw output, as it arrives, to the lines torchdeck reads: a line ends at a newline; a
    line rewritten in place with ``\\r`` (a progress bar) is read as it updates, its newest state at
    most every ``every_s`` seconds (a bar refreshing 10 times a second costs one parse in five), and
    its last state always. Bytes only: the caller passes the output through unchanged."""

    SEP = re.compile(rb"[\r\n]")

    def __init__(self, every_s: float = 0.5, clock: Callable[[], float] = time.monotonic, max_line: int = 1 << 20):
        self.every_s, self.clock, self.max_line = every_s, clock, max_line
        self.buffer = b""
        self.pending: bytes | None = None
        """The newest complete state of the line being rewritten, not read yet."""
        self.in_place = False
        self.shown = b""
        self.last_read = float("-inf")

    def feed(self, data: bytes) -> list[str]:
        """The lines and updates ``data`` completes (with what came before it)."""
        self.buffer += data
        out: list[str] = []
        start = 0
        while (m := self.SEP.search(self.buffer, start)) is not None:
            i = m.start()
            if self.buffer[i : i + 1] == b"\r" and i + 1 == len(self.buffer):
                break  # a CR last in the chunk may be the first half of a CRLF
            segment = self.buffer[start:i]
            newline = self.buffer[i : i + 1] == b"\n" or self.buffer[i + 1 : i + 2] == b"\n"
            start = i + (2 if self.buffer[i : i + 2] == b"\r\n" else 1)
            if newline:
                if segment.strip():
                    out.append(segment.decode(errors="replace"))
                self.pending, self.in_place, self.shown = None, False, b""
            else:
                if segment.strip():
                    self.pending = segment
                self.in_place = True
        self.buffer = self.buffer[start:]
        if len(self.buffer) > self.max_line:  # no end in sight: read it as it is
            out.append(self.buffer.decode(errors="replace"))
            self.buffer = b""
        out += self.idle()
        return out

    def idle(self) -> list[str]:
        """The newest state of a line being rewritten, where it changed and the throttle allows."""
        if not self.in_place or self.clock() - self.last_read < self.every_s:
            return []
        newest = self.buffer if self.buffer.strip() else self.pending
        self.pending = None
        if not newest or newest == self.shown:
            return []
        self.shown, self.last_read = newest, self.clock()
        return [newest.decode(errors="replace")]

    def close(self) -> list[str]:
        """What is left when the output ends."""
        rest = self.buffer if self.buffer.strip() else self.pending
        self.buffer, self.pending = b"", None
        return [rest.decode(errors="replace")] if rest and rest != self.shown else []


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
        self.tracebacks: dict[int, list[str]] = {}
        """Ranks whose output is inside a Python traceback, with its lines so far (its last is the error)."""

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
        held = self.tracebacks.get(rank)
        if held is not None:
            held.append(text.rstrip("\n"))
            if exception_of(text) is not None:
                error = traceback_error(held) or {}
                error.pop("repeats", None)
                del self.tracebacks[rank]
                records.append(parser.record("error", now=now, **error))
                return rank, raw, records
            if len(held) > 400:  # no end in sight: not a traceback torchdeck can read
                del self.tracebacks[rank]
        if text.startswith("Traceback (most recent call last)"):
            self.tracebacks[rank] = [text.rstrip("\n")]
        for update in updates_in(text):  # a bar's updates arrive together from a pod's log
            record = parser.feed(update, now)
            if record is not None:
                records.append(record)
        return rank, raw, records
