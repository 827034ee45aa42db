"""Runs side by side: their loss curves (one line a run, its ranks averaged, or each rank), their
validation curves, and a table of what differs in their specs and how they did (final and best
losses, the loss where all had got to, accuracy, wall time, speed, cost).

Plain Python, no Textual: ``torchdeck compare`` prints ``Comparison.rows`` and ``to_json``; the
comparison screen draws the same rows and curves."""

from __future__ import annotations

import time
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torchdeck.backends.base import Backend, JobStatus
from torchdeck.backends.cost import RunCost
from torchdeck.backends.errors import BackendError
from torchdeck.backends.names import STAMPED_ID_RE
from torchdeck.backends.run_digest import DigestStore, RunDigest, digest_of, lost_steps
from torchdeck.backends.spec import JobSpec

from .state import format_duration

NOT_COMPARED = ("name", "resumes", "cluster.avoid_nodes")
"""Spec fields every run differs in without saying anything about how it trained (a restart's
lineage and the nodes it kept off say where it ran, not how)."""
MAX_LINEAGE = 32
"""Restarts followed back from a run, at most (a lineage is a chain of ``resumes``)."""


@dataclass
class ComparedRun:
    """One run in a comparison: its status now, its spec (None where the backend keeps none) and its digest."""

    status: JobStatus
    spec: JobSpec | None
    digest: RunDigest
    label: str = ""
    earlier: list[ComparedRun] = field(default_factory=list)
    """The runs this one resumed, oldest first (``torchdeck resume``): its digest is theirs and its
    own as one line; its wall time starts with the first and its cost adds theirs."""
    resumed_at: float | None = None
    """The step its own digest resumed from (the joined line's is the first run's): where the run it
    resumed lost its steps from."""

    @property
    def lineage(self) -> list[str]:
        return [r.status.run_id for r in self.earlier] + [self.status.run_id]

    @property
    def started_at(self) -> float:
        return (self.earlier[0] if self.earlier else self).status.submitted_at

    @property
    def cost(self) -> RunCost | None:
        costs = [r.status.cost for r in [*self.earlier, self]]
        if not self.earlier or any(c is None for c in costs):
            return self.status.cost
        own = self.status.cost
        assert own is not None
        lines = [line for c in costs if c is not None for line in c.lines]
        return RunCost(lines, own.budget, own.currency, own.running)


@dataclass
class Row:
    """One line of the comparison table: a name, a cell per run, and which run is best (or None)."""

    name: str
    cells: list[str]
    best: int | None = None
    spec: bool = False
    """A spec field that differs (not a result)."""


def load_run(backend: Backend, store: DigestStore, run_id: str, live: bool = False) -> ComparedRun:
    """One run for a comparison: its status (``run_id`` may be a unique prefix), spec and digest
    (blocking: a worker thread's, or the command's). With ``live``, a running run's digest starts
    empty: the caller follows its events into it."""
    status = backend.status(run_id)
    try:
        spec: JobSpec | None = backend.run_spec(status.run_id)
    except BackendError:  # a job that keeps no spec: its figures still compare
        spec = None
    if live and not status.state.is_terminal:
        run = ComparedRun(status, spec, RunDigest(status.run_id))
    else:
        run = ComparedRun(status, spec, digest_of(backend, store, status))
    run.earlier = earlier_runs(backend, store, run)
    run.resumed_at = run.digest.resumed_at
    if run.earlier:
        digest = run.earlier[0].digest
        for later in [*run.earlier[1:], run]:
            digest = digest.then(later.digest)
        run.digest = digest
    return run


def earlier_runs(backend: Backend, store: DigestStore, run: ComparedRun) -> list[ComparedRun]:
    """The runs ``run`` resumed, oldest first, as far back as the backend still knows them."""
    found: list[ComparedRun] = []
    earlier = run.spec.resumes if run.spec is not None else None
    seen = {run.status.run_id}
    while earlier and earlier not in seen and len(found) < MAX_LINEAGE:
        seen.add(earlier)
        try:
            status = backend.status(earlier)
            spec: JobSpec | None = backend.run_spec(status.run_id)
        except BackendError:  # gone (a cluster job past its TTL): the line starts where it is known
            break
        found.insert(0, ComparedRun(status, spec, digest_of(backend, store, status)))
        earlier = spec.resumes if spec is not None else None
    return found


def flat_spec(spec: JobSpec | None) -> dict[str, str]:
    """A spec as ``field.sub: value`` pairs; the program's arguments as one pair a flag
    (``args --lr: 0.1``), so that three runs of one script with three learning rates differ in one row."""
    if spec is None:
        return {}
    out: dict[str, str] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, Mapping):
            for key, sub in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), sub)
        elif prefix == "entrypoint.args" and isinstance(value, (list, tuple)):
            out.update(argument_pairs(list(value)))
        else:
            out[prefix] = "-" if value is None else str(value)

    walk("", spec.to_dict())
    for key in NOT_COMPARED:
        out.pop(key, None)
    return out


def argument_pairs(args: list[str]) -> dict[str, str]:
    """``--lr 0.1 --amp data/`` -> {"args --lr": "0.1", "args --amp": "yes", "args 1": "data/"}."""
    out: dict[str, str] = {}
    i, position = 0, 0
    while i < len(args):
        arg = str(args[i])
        if arg.startswith("-") and len(arg) > 1 and not _number(arg):
            flag, eq, value = arg.partition("=")
            if eq:
                out[f"args {flag}"] = value
            elif i + 1 < len(args) and (not str(args[i + 1]).startswith("-") or _number(str(args[i + 1]))):
                out[f"args {flag}"] = str(args[i + 1])
                i += 1
            else:
                out[f"args {flag}"] = "yes"
        else:
            position += 1
            out[f"args {position}"] = arg
        i += 1
    return out


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def labels(run_ids: list[str], width: int = 16) -> list[str]:
    """Short names that tell the runs apart: their ids without what all share at the start."""
    common = 0
    if len(run_ids) > 1:
        first, last = min(run_ids), max(run_ids)
        while common < min(len(first), len(last)) and first[common] == last[common]:
            common += 1
        while common and first[common - 1] not in "-_.":  # cut at a separator, not inside a word
            common -= 1

    def short(text: str) -> str:  # the job's name first, the id's time last: what tells runs apart
        if len(text) <= width:
            return text
        stamped = STAMPED_ID_RE.match(text)  # the day goes first: name~HHMMSS
        if stamped:
            return stamped["name"][: width - len(stamped["time"]) - 1] + "~" + stamped["time"]
        return text[: width - 7] + "~" + text[-6:]

    return [short(r[common:] or r) for r in run_ids]


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _best(values: list[float | None], lowest: bool) -> int | None:
    """Which value is best (the lowest, or the highest); None with fewer than two to compare."""
    known = [(v, i) for i, v in enumerate(values) if v is not None]
    if len(known) < 2:
        return None
    return (min(known) if lowest else max(known))[1]


@dataclass
class Comparison:
    """Several runs' figures side by side (any backend; running runs included)."""

    runs: list[ComparedRun]
    now: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        for run, label in zip(self.runs, labels([r.status.run_id for r in self.runs]), strict=True):
            run.label = run.label or label

    @property
    def common_step(self) -> int:
        """The furthest step every run has reached (where their losses compare fairly)."""
        steps = [int(r.digest.max_step) for r in self.runs if r.digest.max_step]
        return min(steps) if steps else 0

    def differing(self) -> dict[str, list[str]]:
        """The spec fields whose values are not all the same, each run's value. A value naming the
        run itself (its own folder for data or checkpoints) says RUN there: that is no difference."""
        flats = [{k: v.replace(r.status.run_id, "RUN") for k, v in flat_spec(r.spec).items()} for r in self.runs]
        keys = sorted({k for f in flats for k in f})
        out = {}
        for key in keys:
            values = [f.get(key, "-") if r.spec is not None else "?" for f, r in zip(flats, self.runs, strict=True)]
            if len(set(values)) > 1:
                out[key] = values
        return out

    def figures(self, run: ComparedRun) -> dict[str, Any]:
        """One run's figures, as ``--output json`` gives them."""
        s = run.status
        summary = run.digest.summary()
        end = s.finished_at or (None if s.state.is_terminal else self.now)
        cost = run.cost
        summary.update(
            run_id=s.run_id,
            label=run.label,
            backend=s.backend,
            state=s.state.value,
            reason=s.reason,
            world_size=s.world_size,
            wall_s=(end - run.started_at) if end and run.started_at else None,
            loss_at_common_step=run.digest.loss_at(self.common_step) if self.common_step else None,
            cost=cost.to_dict() if cost is not None else None,
            restarts=run.lineage[:-1],
            recoveries=[r.to_json() for r in run.digest.recoveries],
            steps_lost=sum(
                lost_steps(a.digest, b.digest, b.resumed_at) for a, b in zip(run.earlier, [*run.earlier[1:], run])
            )
            + sum(r.lost or 0 for r in run.digest.recoveries),
        )
        return summary

    def rows(self) -> list[Row]:
        """The table: how each run did, then what differs in their specs."""
        figs = [self.figures(r) for r in self.runs]
        common = self.common_step

        def row(name: str, key: str, fmt: str, lowest: bool | None) -> Row:
            values = [f.get(key) for f in figs]
            return Row(name, [_num(v, fmt) for v in values], None if lowest is None else _best(values, lowest))

        out = [
            Row("state", [f["state"] for f in figs]),
            Row("ranks", [str(f["world_size"] or f["ranks"]) for f in figs]),
            Row("steps", [str(f["steps"]) for f in figs]),
            row("final loss", "final_loss", ".4f", True),
            row("best loss", "best_loss", ".4f", True),
            row(f"loss @ {common}", "loss_at_common_step", ".4f", True),
            row("val loss", "final_val_loss", ".4f", True),
            row("best val loss", "best_val_loss", ".4f", True),
        ]
        accs = [f["best_accuracy"] for f in figs]
        out.append(
            Row(
                "best acc",
                [_num(None if a is None else a * 100, ".1f") + ("%" if a is not None else "") for a in accs],
                _best(accs, False),
            )
        )
        walls = [f["wall_s"] for f in figs]
        out.append(Row("wall time", [format_duration(w) for w in walls], _best(walls, True)))
        speeds = [f["speed"] for f in figs]
        unit = {f["speed_unit"] for f in figs if f["speed"] is not None}
        out.append(
            Row(unit.pop() if len(unit) == 1 else "speed", [_num(v, ",.0f") for v in speeds], _best(speeds, False))
        )
        if any(r.earlier or r.digest.recoveries for r in self.runs):  # resumes, and recoveries inside a run
            out.append(Row("restarts", [str(len(r.earlier) + len(r.digest.recoveries)) for r in self.runs]))
            out.append(
                Row("steps lost", [str(f["steps_lost"]) for f in figs], _best([f["steps_lost"] for f in figs], True))
            )
        costs = [r.cost for r in self.runs]
        amounts = [c.amount if c is not None else None for c in costs]
        out.append(Row("cost", [c.cell() if c is not None else "-" for c in costs], _best(amounts, True)))
        out = [r for r in out if any(c != "-" for c in r.cells)]  # a figure no run reports says nothing
        for key, values in self.differing().items():
            out.append(Row(key, values, spec=True))
        return out

    def recovery_lines(self) -> list[str]:
        """Each recovery inside a run, a line each, named by the run's label: where its ranks moved,
        the step it resumed from, the steps lost."""
        return [f"{run.label}: {r.words()}" for run in self.runs for r in run.digest.recoveries]

    def mean_curves(self) -> dict[int, tuple[array, array]]:
        """Each run's loss, its ranks averaged, keyed by the run's place in the comparison."""
        return {i: r.digest.mean_curve() for i, r in enumerate(self.runs)}

    def rank_curves(self, limit: int) -> tuple[dict[int, tuple[array, array]], list[str]]:
        """Each run's ranks' curves (at most ``limit`` lines, the lowest ranks of each run in turn), and their labels."""
        picked: list[tuple[int, int]] = []
        depth = 0
        while len(picked) < limit:
            added = False
            for i, r in enumerate(self.runs):
                ranks = sorted(r.digest.ranks)
                if depth < len(ranks) and len(picked) < limit:
                    picked.append((i, ranks[depth]))
                    added = True
            if not added:
                break
            depth += 1
        curves = {n: self.runs[i].digest.ranks[rank].curve.points() for n, (i, rank) in enumerate(picked)}
        return curves, [f"{self.runs[i].label}:r{rank}" for i, rank in picked]

    def val_curves(self) -> dict[int, tuple[array, array]]:
        return {i: r.digest.val_curve() for i, r in enumerate(self.runs)}

    def to_json(self, points: int = 200) -> dict[str, object]:
        """The comparison for ``--output json``: each run's figures and its mean loss curve (at most ``points`` points)."""
        runs = []
        for run in self.runs:
            fig = self.figures(run)
            xs, ys = run.digest.mean_curve()
            stride = max(1, -(-len(xs) // points))
            fig["curve"] = {"step": list(xs[::stride]), "loss": list(ys[::stride])}
            vx, vy = run.digest.val_curve()
            fig["val_curve"] = {"step": list(vx), "loss": list(vy)}
            fig["spec"] = flat_spec(run.spec) if run.spec is not None else None
            runs.append(fig)
        return {"common_step": self.common_step, "differs": self.differing(), "runs": runs}


def unique_best(row: Row) -> int | None:
    """The row's best run, where it reads better than every other (a tie marks none)."""
    if row.best is None or row.cells.count(row.cells[row.best]) > 1:
        return None
    return row.best


def format_rows(rows: list[Row], heads: list[str], mark: str = "*") -> str:
    """The table as text: a column a run, the best of a row marked."""
    table = [["", *heads]]
    for row in rows:
        best = unique_best(row)
        cells = [c + (mark if best == i else "") for i, c in enumerate(row.cells)]
        table.append([row.name, *cells])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    spec_at = next((i for i, r in enumerate(rows) if r.spec), None)
    if spec_at is not None:
        lines.insert(spec_at + 1, "differs in the spec:")
    return "\n".join(lines)
