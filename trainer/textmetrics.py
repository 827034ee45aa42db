"""Metrics from any training script's output: a rank's lines become schema-1
metric records (``torchdeck.trainer.metrics``), so the monitor, ``jobs``,
``status`` and ``train`` show user code as they show the built-in trainer.

- schema-1 JSON lines (the reporting helper, ``torchdeck.report``) pass
  through as they are;
- progress bars (tqdm's ``N/M [elapsed<left, rate, key=value]``, Lightning's
  rich ``N/M 0:00:01 • 0:00:02 31.2it/s key: value``) give the step, total,
  epoch, rate and the postfix's metrics by name; a line rewritten in place is
  read per update (``rewrites.Rewrites`` as it arrives, ``rewrites.updates_in`` for a pod log's
  line);
- text in the common formats is recognised: ``loss: 1.23``, ``loss=1.23``,
  ``Loss 1.2345e+00 (1.3e+00)``, ``| loss  7.63 |``, ``train_loss 1.2``,
  ``'loss': 0.3``, with ``step/iter/batch N[/M]``, ``epoch N[/M]``,
  ``acc/accuracy/Acc@1/top1 X[%]`` and ``X samples/s`` where the line has them;
- a spec's ``metrics.pattern`` (a regular expression with named groups
  among ``PATTERN_GROUPS``) replaces the built-in formats. It is the user's,
  so it runs on RE2 (google-re2), whose matching is linear in the line: a
  pattern such as ``(a+)+b`` took Python's engine seconds per line, and
  would have stalled the metric reader for every rank.

A line with a loss (or a bar's position) is a ``step``; a line with an accuracy or a held-out loss
and no training loss is an ``eval``. Where a line has no step number, the script's own step marker
(``STEP: 3`` on a line of its own) stands, else a rank's loss lines are counted. A traceback's end
is read by ``tracebacks.traceback_error``.
Standard library only, but for RE2 where a pattern is given: it runs beside
the user's code (the local rank wrapper, the pods' relay) and in the console's metric reader."""

from __future__ import annotations

import functools
import json
import math
import re
import time
from collections.abc import Mapping
from typing import Any, Protocol

try:
    from .logfiles import metric_role
    from .rewrites import ANSI_RE, updates_in
    from .tracebacks import AFTERMATH_RE, exception_of, traceback_error
except ImportError:  # a file of the code bundle's relay (``.torchdeck/``): its copies lie beside it
    from logfiles import metric_role  # type: ignore[no-redef]
    from rewrites import ANSI_RE, updates_in  # type: ignore[no-redef]
    from tracebacks import AFTERMATH_RE, exception_of, traceback_error  # type: ignore[no-redef]

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


def _loss_rank(key: str) -> int:
    """Which training loss a bar's postfix means first: the step's over an epoch's mean."""
    k = key.lower()
    return 0 if k.endswith("_step") or k in ("loss", "train_loss") else 2 if k.endswith("_epoch") else 1


NESTED_BAR = "\x1b[A"
"""The cursor-up code a bar drawn under another (tqdm's ``position=1``) ends with, to go back up."""
QUOTED_NUMBER_RE = re.compile(r"""(['"])""" + _NUM + r"\1")
"""A number in quotes, as Hugging Face's Trainer (5.x) prints its logs: ``{'loss': '7.132', ...}``."""
EPOCHS_DONE_RE = re.compile(r"""['"](?:learning_rate|grad_norm|eval_runtime)['"]\s{0,3}:""")
"""A printed dict of Hugging Face's Trainer, whose ``epoch`` is the epochs done (0.2, ..., 1.0 as the
first ends), not the epoch's index."""
RUN_SUMMARY_RE = re.compile(r"""['"]?train_runtime['"]?\s{0,3}[:=]""")
"""A line of figures for the whole run (Hugging Face's Trainer ends with ``{'train_runtime': 9.8,
..., 'train_loss': 1.95, 'epoch': 2.0}``: the mean loss over the run, not a step's)."""
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


Figures = dict[str, float | None]
"""What one line says, by name (loss, step, epoch, a bar's position and total...), before it is a
record: numbers (counts are ints, ``progress`` is True), None where a pattern found a word and no number."""


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
        self.bar_live = False
        """A progress bar is being drawn: a loss line with no step of its own is the bar's next step's."""
        self.waiting: Figures | None = None
        """Such a line's figures, until the bar's next position gives their step (``tqdm.write`` prints
        a log line, as Hugging Face's Trainer does, before the bar redraws at the step it was logged)."""
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
            nested = NESTED_BAR in text
            text = ANSI_RE.sub("", text)
            if nested and BAR_RE.search(text):
                return None  # an inner loop's bar (an evaluation's, under the training bar)
        logged_dict = text.lstrip().startswith("{")
        if logged_dict and "'" in text:
            text = QUOTED_NUMBER_RE.sub(r"\2", text)  # a printed dict's values, as numbers
        if self.pattern is None and RUN_SUMMARY_RE.search(text):
            return None  # the whole run's figures (its mean loss), not a step's
        found = self._match_pattern(text) if self.pattern else self._match_builtin(text)
        if found is None:
            return None
        if "marker" in found:
            self.marker, self.marker_used = int(found["marker"] or 0), False
            total = found.get("total_steps")
            self.marker_total = int(total) if total else self.marker_total
            return None
        if self.pattern is None:
            if logged_dict and (epoch := found.get("epoch")) is not None and EPOCHS_DONE_RE.search(text):
                found["epoch"] = max(0.0, math.ceil(epoch) - 1.0)  # epochs done: the index is one less
            found = self._with_bar(found)
            if found is None:
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
            if total := found.get("total_steps"):
                record["total_steps"] = int(total)
            if per := found.get("epoch_steps"):
                record["epoch_steps"] = int(per)
        for key in ("accuracy", "val_loss"):
            if found.get(key) is not None:
                record[key] = found[key]
        if epochs := found.get("epochs"):
            record["epochs"] = int(epochs)
        return record

    def _with_bar(self, found: Figures) -> Figures | None:
        """While a bar is drawn, a training loss printed with no step waits for the bar's next
        position, which carries it (None: it waits)."""
        if found.get("progress"):
            self.bar_live = True
            waiting, self.waiting = self.waiting, None
            if waiting is not None and found.get("loss") is None:
                found["loss"] = waiting["loss"]
            return found
        stepless = not any(k in found for k in ("step", "batch", "marker"))
        if self.bar_live and stepless and found.get("loss") is not None:
            self.waiting = {**(self.waiting or {}), **found}
            if found.get("epoch") is not None:
                self.epoch = found["epoch"]
            return None
        return found

    def _global_step(self, found: Figures) -> int | None:
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
        if epochs := found.get("epochs"):
            found["total_steps"] = int(epochs) * int(per)
        return max(0, int(self.epoch) - self.epoch_base) * int(per) + int(batch)

    def _match_pattern(self, text: str) -> Figures | None:
        assert self.pattern is not None
        m = self.pattern.search(text)
        if m is None:
            return None
        found: Figures = {}
        for name, value in m.groupdict().items():
            if value is not None:
                number = _number(value.rstrip("%"))
                if name == "accuracy" and number is not None and (value.endswith("%") or number > 1):
                    number /= 100
                found[name] = number
        if "loss" not in found and found.get("accuracy") is None:
            return None
        return found

    def _match_builtin(self, text: str) -> Figures | None:
        found: Figures = {}
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

    def _read_bar(self, text: str, bar: re.Match[str], found: Figures) -> None:
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
        _bar_position(found, int(bar.group(1)), int(bar.group(2)) if bar.group(2) else None, _epochs(prefix))

    def _read_rich_bar(self, text: str, bar: re.Match[str], found: Figures) -> None:
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
        _bar_position(found, int(bar.group(1)), int(bar.group(2)), _epochs(prefix, last_index=True))


def _epochs(prefix: str, last_index: bool = False) -> Figures:
    """The epoch a bar's description names, and the count where it says one (``Epoch 1/4``;
    ``last_index``: Lightning's rich bar counts to the last epoch's index, so 1/1 is 2 epochs)."""
    m = EPOCH_RE.search(prefix) if "epoch" in prefix.lower() else None
    if m is None:
        return {}
    out: Figures = {"epoch": float(m.group(1))}
    if m.group(2):
        out["epochs"] = int(m.group(2)) + (1 if last_index else 0)
    return out


def _bar_position(found: Figures, n: int, total: int | None, epochs: Figures) -> None:
    """Where a bar is: the batch within the epoch its description names, else the step itself."""
    found["progress"] = True
    found.update(epochs)
    if epochs:
        found["batch"], found["epoch_steps"] = n, total
    else:
        found["step"], found["total_steps"] = n, total


def _postfix(pairs: list[tuple[str, str]], found: Figures, held_out: bool) -> None:
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
        self.failed = False
        """A rank has given its error: torchrun's own traceback that follows is not another reason."""

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
                if not (self.failed and AFTERMATH_RE.match(str(error.get("message", "")))):
                    records.append(parser.record("error", now=now, **error))
                    self.failed = True
                return rank, raw, records
            if len(held) > 400:  # no end in sight: not a traceback torchdeck can read
                del self.tracebacks[rank]
        if text.startswith("Traceback (most recent call last)"):
            self.tracebacks[rank] = [text.rstrip("\n")]
        for update in updates_in(text):  # a bar's updates arrive together from a pod's log
            record = parser.feed(update, now)
            if record is not None:
                records.append(record)
                self.failed = self.failed or record.get("event") == "error"
        return rank, raw, records
