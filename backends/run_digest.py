"""A run's digest: its metric events folded into what a comparison of runs needs (each rank's loss
curve, the ranks' mean curve, validation losses and accuracies, final and best figures, speed),
bounded however long the run, and kept in one small file once the run has ended.

A run of 64 ranks and 10,000 steps writes 640,000 metric lines; a comparison of eight of them
cannot read five million lines each time it opens. The digest reads them once (the local
launcher makes it as its run ends; a cluster run's is made by the first comparison that sees it
ended, and outlives its pods) and a comparison reads eight small files."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from array import array
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .errors import SpecError
from .files import read_bytes, write_atomically
from .recovery import Recovery, RecoveryLog

if TYPE_CHECKING:
    from .base import Backend, JobStatus, MetricEvent
    from .spec import JobSpec

DIGEST_VERSION = 3
RANK_POINTS = 500
"""Points kept of each rank's curve."""
MEAN_POINTS = 2000
"""Points kept of the ranks' mean curve (what a comparison draws by default)."""
DIGEST_FILE = "digest.json"


class BucketCurve:
    """A curve of at most ``cap`` points: each point the mean of the (step, value) pairs whose step
    falls in its bucket of ``width`` steps; the width doubles (pairs of buckets merge) when the
    buckets fill. Pairs may come in any order (ranks' files are read one after another), and the
    mean of ranks that report the same steps is the mean of their values."""

    __slots__ = ("buckets", "cap", "width")

    def __init__(self, cap: int, width: int = 1):
        self.cap, self.width = cap, width
        self.buckets: dict[int, list[float]] = {}
        """bucket -> [sum of steps, sum of values, count]"""

    def add(self, x: float, y: float, n: float = 1.0) -> None:
        """One pair (or ``n`` pairs whose mean it is)."""
        key = int(x) // self.width
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [x * n, y * n, n]
            if len(self.buckets) > self.cap:
                self._merge()
        else:
            bucket[0] += x * n
            bucket[1] += y * n
            bucket[2] += n

    def _merge(self) -> None:
        self.width *= 2
        merged: dict[int, list[float]] = {}
        for key, (sx, sy, n) in self.buckets.items():
            into = merged.get(key // 2)
            if into is None:
                merged[key // 2] = [sx, sy, n]
            else:
                into[0] += sx
                into[1] += sy
                into[2] += n
        self.buckets = merged

    def points(self) -> tuple[array, array]:
        """Steps and values in step order, as ``array('d')``."""
        xs, ys = array("d"), array("d")
        for key in sorted(self.buckets):
            sx, sy, n = self.buckets[key]
            xs.append(sx / n)
            ys.append(sy / n)
        return xs, ys

    def __len__(self) -> int:
        return len(self.buckets)

    def up_to(self, step: float) -> BucketCurve:
        """A copy holding only the buckets at or before ``step`` (what a restart kept of a run)."""
        curve = BucketCurve(self.cap, self.width)
        curve.buckets = {k: list(b) for k, b in self.buckets.items() if b[0] / b[2] <= step}
        return curve

    def then(self, later: BucketCurve) -> BucketCurve:
        """This curve followed by ``later``'s points (each point of either weighs what it held)."""
        curve = BucketCurve(self.cap, max(self.width, later.width))
        for source in (self, later):
            for sx, sy, n in source.buckets.values():
                curve.add(sx / n, sy / n, n)
        return curve

    def to_json(self) -> dict[str, object]:
        xs, ys = self.points()
        return {
            "width": self.width,
            "x": xs.tolist(),
            "y": ys.tolist(),
            "n": [int(self.buckets[k][2]) for k in sorted(self.buckets)],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], cap: int) -> BucketCurve:
        curve = cls(cap, int(data["width"]))
        for x, y, n in zip(data["x"], data["y"], data["n"], strict=True):
            curve.buckets[int(x) // curve.width] = [x * n, y * n, float(n)]
        return curve


def _finite(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


@dataclass
class RankDigest:
    """One rank: its loss curve, its last loss, its speed."""

    curve: BucketCurve = field(default_factory=lambda: BucketCurve(RANK_POINTS))
    last: tuple[float, float] | None = None
    """(step, loss) of its latest loss."""
    logged: bool = False
    """A logger file gives this rank's loss: its printed losses (a bar's, rounded) are left out."""
    speed_sum: float = 0.0
    speed_n: int = 0
    speed_unit: str = ""


@dataclass
class RunDigest:
    """What a comparison shows of one run (``ingest`` its events; ``summary`` its figures)."""

    run_id: str
    ranks: dict[int, RankDigest] = field(default_factory=dict)
    mean: BucketCurve = field(default_factory=lambda: BucketCurve(MEAN_POINTS))
    val: dict[float, list[float]] = field(default_factory=dict)
    """step -> [sum of validation losses, count] (the ranks' mean at each step)."""
    accuracy: dict[float, float] = field(default_factory=dict)
    """step (or epoch) -> accuracy (0..1), the lowest rank's."""
    max_step: float = 0.0
    events: int = 0
    stopped: bool = False
    checkpoint_step: float | None = None
    """The step of the newest checkpoint the run said it wrote (the trainer's ``checkpoint`` events)."""
    resumed_at: float | None = None
    """The step it resumed from (its ``resume`` event): a restart's start."""
    complete: bool = False
    """Made from every event of an ended run: kept, and never read again."""
    recovery: RecoveryLog = field(default_factory=RecoveryLog)
    """Its recoveries inside it (each attempt after the first), folded from its events."""
    kept_recoveries: list[Recovery] | None = None
    """Those read back from a kept digest, or joined from a lineage (``then``)."""

    @property
    def recoveries(self) -> list[Recovery]:
        """Each attempt after the first inside the run (not a ``torchdeck resume``: that is a run of its own)."""
        return self.kept_recoveries if self.kept_recoveries is not None else self.recovery.recoveries()

    def ingest(self, events: Iterable[MetricEvent]) -> int:
        n = 0
        ranks, mean = self.ranks, self.mean
        events = list(events)
        self.recovery.feed(events)
        for ev in events:
            n += 1
            rec = ev.record
            kind = ev.event
            rank = ranks.get(ev.rank)
            if rank is None:
                rank = ranks[ev.rank] = RankDigest()
            if kind == "step":
                step = rec.get("step")
                loss = _finite(rec.get("loss"))
                if isinstance(step, (int, float)):
                    if step > self.max_step:
                        self.max_step = step
                    if loss is not None:
                        logged = rec.get("source") == "logger"
                        if logged and not rank.logged:  # a logger's curve replaces the printed one
                            rank.logged, rank.curve = True, BucketCurve(RANK_POINTS)
                        if logged or not rank.logged:
                            rank.curve.add(step, loss)
                            mean.add(step, loss)
                            rank.last = (step, loss)
                speed = rec.get("samples_per_s")
                unit = "samples/s"
                if speed is None:
                    speed, unit = rec.get("steps_per_s"), "steps/s"
                if isinstance(speed, (int, float)) and speed > 0:
                    rank.speed_sum += speed
                    rank.speed_n += 1
                    rank.speed_unit = unit
            elif kind == "stopped":
                self.stopped = True
            elif kind in ("checkpoint", "resume") and isinstance(rec.get("step"), (int, float)):
                mark = float(rec["step"])
                if kind == "checkpoint":
                    self.checkpoint_step = max(self.checkpoint_step or 0.0, mark)
                elif self.resumed_at is None or mark < self.resumed_at:
                    self.resumed_at = mark
            if kind in ("step", "eval", "epoch") or "val_loss" in rec:
                at = rec.get("step") or rec.get("epoch")
                if not isinstance(at, (int, float)):
                    continue
                val = _finite(rec.get("val_loss"))
                if val is None and kind == "eval":
                    val = _finite(rec.get("loss"))  # the built-in trainer's eval: loss on the test set
                if val is not None:
                    bucket = self.val.setdefault(float(at), [0.0, 0.0])
                    bucket[0] += val
                    bucket[1] += 1
                acc = _finite(rec.get("accuracy"))
                if acc is not None and (kind == "eval" or ev.rank == min(ranks)):
                    self.accuracy[float(at)] = acc
        self.events += n
        return n

    # -- figures ---------------------------------------------------------------------------------

    def mean_curve(self) -> tuple[array, array]:
        return self.mean.points()

    def val_curve(self) -> tuple[array, array]:
        xs, ys = array("d"), array("d")
        for step in sorted(self.val):
            total, count = self.val[step]
            xs.append(step)
            ys.append(total / count)
        return xs, ys

    def loss_at(self, step: float) -> float | None:
        """The ranks' mean loss at the point nearest ``step`` (at or before it)."""
        xs, ys = self.mean.points()
        best = None
        for x, y in zip(xs, ys, strict=True):
            if x > step:
                break
            best = y
        return best

    def summary(self) -> dict[str, object]:
        """Final and best figures: the ranks' mean loss at their last step, the lowest point of the
        mean curve, the validation loss and accuracy (last and best), and the run's speed (the
        ranks' speeds added up)."""
        lasts = [r.last[1] for r in self.ranks.values() if r.last is not None]
        _, ys = self.mean.points()
        _, vals = self.val_curve()
        accs = [self.accuracy[k] for k in sorted(self.accuracy)]
        speeds = [r.speed_sum / r.speed_n for r in self.ranks.values() if r.speed_n]
        units = {r.speed_unit for r in self.ranks.values() if r.speed_n}
        return {
            "steps": int(self.max_step),
            "ranks": len(self.ranks),
            "final_loss": sum(lasts) / len(lasts) if lasts else None,
            "best_loss": min(ys) if ys else None,
            "final_val_loss": vals[-1] if vals else None,
            "best_val_loss": min(vals) if vals else None,
            "final_accuracy": accs[-1] if accs else None,
            "best_accuracy": max(accs) if accs else None,
            "speed": sum(speeds) if speeds else None,
            "speed_unit": units.pop() if len(units) == 1 else "samples/s",
        }

    def then(self, later: RunDigest) -> RunDigest:
        """This run followed by ``later``, the run that resumed it: one line, this run's figures up
        to the step ``later`` resumed from (its steps after that were lost), then ``later``'s."""
        cut = next((c for c in (later.resumed_at, self.checkpoint_step) if c is not None), self.max_step)
        out = RunDigest(later.run_id, complete=self.complete and later.complete)
        out.max_step = max(later.max_step, min(self.max_step, cut))
        out.events = self.events + later.events
        out.stopped = later.stopped
        out.checkpoint_step = later.checkpoint_step if later.checkpoint_step is not None else self.checkpoint_step
        out.resumed_at = self.resumed_at
        out.kept_recoveries = self.recoveries + later.recoveries
        out.mean = self.mean.up_to(cut).then(later.mean)
        out.val = {k: list(v) for k, v in self.val.items() if k <= cut} | {k: list(v) for k, v in later.val.items()}
        out.accuracy = {k: v for k, v in self.accuracy.items() if k <= cut} | dict(later.accuracy)
        for rank in sorted(set(self.ranks) | set(later.ranks)):
            before, after = self.ranks.get(rank), later.ranks.get(rank)
            if after is None:
                out.ranks[rank] = RankDigest(before.curve.up_to(cut), before.last) if before else RankDigest()
                continue
            curve = before.curve.up_to(cut).then(after.curve) if before else after.curve
            out.ranks[rank] = RankDigest(
                curve, after.last, after.logged, after.speed_sum, after.speed_n, after.speed_unit
            )
        return out

    # -- the file --------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "version": DIGEST_VERSION,
                "run_id": self.run_id,
                "complete": self.complete,
                "max_step": self.max_step,
                "events": self.events,
                "stopped": self.stopped,
                "checkpoint_step": self.checkpoint_step,
                "resumed_at": self.resumed_at,
                "recoveries": [r.to_json() for r in self.recoveries],
                "mean": self.mean.to_json(),
                "val": [[k, v[0], v[1]] for k, v in sorted(self.val.items())],
                "accuracy": sorted(self.accuracy.items()),
                "ranks": {
                    str(r): {
                        "curve": d.curve.to_json(),
                        "last": d.last,
                        "logged": d.logged,
                        "speed": [d.speed_sum, d.speed_n, d.speed_unit],
                    }
                    for r, d in sorted(self.ranks.items())
                },
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> RunDigest | None:
        """A digest file read back; None where it is not one this torchdeck writes (made again)."""
        try:
            raw = orjson.loads(data)
            if raw.get("version") != DIGEST_VERSION:
                return None
            digest = cls(str(raw["run_id"]), complete=bool(raw["complete"]), max_step=float(raw["max_step"]))
            digest.events, digest.stopped = int(raw["events"]), bool(raw["stopped"])
            for key in ("checkpoint_step", "resumed_at"):
                setattr(digest, key, None if raw[key] is None else float(raw[key]))
            digest.kept_recoveries = [Recovery.from_json(r) for r in raw["recoveries"]]
            digest.mean = BucketCurve.from_json(raw["mean"], MEAN_POINTS)
            digest.val = {float(k): [float(s), float(n)] for k, s, n in raw["val"]}
            digest.accuracy = {float(k): float(v) for k, v in raw["accuracy"]}
            for r, d in raw["ranks"].items():
                total, count, unit = d["speed"]
                digest.ranks[int(r)] = RankDigest(
                    BucketCurve.from_json(d["curve"], RANK_POINTS),
                    tuple(d["last"]) if d["last"] else None,
                    bool(d["logged"]),
                    float(total),
                    int(count),
                    str(unit),
                )
            return digest
        except (
            orjson.JSONDecodeError,
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
            OverflowError,
            RecursionError,
            ZeroDivisionError,
        ):
            return None


def lost_steps(before: RunDigest, after: RunDigest, resumed_at: float | None = None) -> int:
    """The steps a restart did again: how far ``before`` got past the step ``after`` resumed from
    (``resumed_at`` where the caller knows it: ``after`` may be a line joined already), else past its
    newest checkpoint."""
    start = next((s for s in (resumed_at, after.resumed_at) if s is not None), before.checkpoint_step)
    return max(0, int(before.max_step - start)) if start is not None else 0


def restart_words(last_step: float, checkpoint_step: float | None) -> str:
    """Where a restart starts and what it loses, in words: ``from step 300 (the run got to 342:
    42 steps lost)``."""
    if checkpoint_step is None:
        return "from its newest checkpoint (the run said of none: the steps lost are not known)"
    lost = max(0, int(last_step - checkpoint_step))
    return f"from step {int(checkpoint_step)} (the run got to {int(last_step)}: {lost} step{'' if lost == 1 else 's'} lost)"


def resume_plan_lines(spec: JobSpec, where: str) -> list[str]:
    """What resuming a cluster run submits, for the person to read before it does: from where,
    which code, which image, the namespace, kind, identity, claim and the nodes it keeps off. None
    for a local run (it starts again in its own folder, with its own command)."""
    c = spec.cluster
    if not c.pvc:  # a cluster run is resumed only from a shared claim
        return []
    code = "the built-in trainer" if spec.builtin else f"code from {spec.entrypoint.code}"
    return [
        f"resume plan: {spec.name} {where}, {code}",
        f"  image {spec.image or '-'}",
        f"  namespace {spec.namespace}, {c.kind}, service account {c.service_account or 'default'}, claim {c.pvc}"
        + (f", kept off {', '.join(c.avoid_nodes)}" if c.avoid_nodes else ""),
    ]


MAX_DIGEST = 64 << 20
"""Bytes of a kept digest at most: a few hundred points per rank, for thousands of ranks."""


class DigestStore:
    """Where digests are kept: in a local run's own folder, else under ``$STATE/digests/SCOPE/``
    (a cluster's runs: their jobs and pods go, their digests stay)."""

    def __init__(self, state_dir: str | os.PathLike):
        self.state_dir = Path(state_dir)

    def path(self, scope: str, status: JobStatus) -> Path:
        if status.backend == "local" and status.location and Path(status.location).is_dir():
            return Path(status.location) / DIGEST_FILE
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in scope)
        # a job torchdeck did not make is named kind/namespace/name: one file, not folders
        return self.state_dir / "digests" / safe / f"{status.run_id.replace('/', '~')}.json"

    def read(self, path: Path) -> RunDigest | None:
        """The digest kept at ``path``; None where there is none, or none readable (it lies in a run's
        folder, which the run's code can write: a FIFO or ``/dev/zero`` there is passed over)."""
        try:
            return RunDigest.from_bytes(read_bytes(path, MAX_DIGEST))
        except (OSError, SpecError):
            return None

    def write(self, path: Path, digest: RunDigest) -> None:
        """Keep a digest; a failure to write only means it is made again next time."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, digest.to_bytes().decode())
        except OSError:
            pass


def fold_run(
    backend: Backend,
    run_id: str,
    digest: RunDigest | None = None,
    follow: bool = False,
    lock: AbstractContextManager[object] | None = None,
) -> RunDigest:
    """Every metric event the run has written folded into ``digest`` (a new one where None); with
    ``follow``, what it writes next too, until it ends, each batch under ``lock`` (a screen reads
    the digest meanwhile). Blocking: call it in a worker thread."""
    digest = RunDigest(run_id) if digest is None else digest
    held = lock if lock is not None else contextlib.nullcontext()

    async def read() -> None:
        async for batch in backend.metrics(run_id, follow=follow):
            with held:
                digest.ingest(batch)

    asyncio.run(read())
    return digest


def digest_of(backend: Backend, store: DigestStore, status: JobStatus) -> RunDigest:
    """The run's digest: the kept one of an ended run, else folded from its events now (and kept,
    complete, where the run has ended)."""
    path = store.path(backend.scope, status)
    kept = store.read(path)
    if kept is not None and kept.complete:
        return kept
    digest = fold_run(backend, status.run_id)
    if status.state.is_terminal:
        digest.complete = True
        store.write(path, digest)
    return digest
