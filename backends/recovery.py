"""A run's recoveries inside it, from its ranks' own events: each attempt after the first (torchrun's
restart, a pod made again by its operator, on the same node or another), where its ranks moved, the
step it resumed from, and the steps it did again.

The built-in trainer's ``start`` event carries its attempt (``restart_count``) and, where there are
several ranks, every rank's node (``nodes``, by rank, gathered as the ranks joined): a rank's old
pod may be gone with its node, yet any rank that lived on says where the lost one was. Its
``resume`` event says the step. The user's own code says neither: its recoveries are not known here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .events import MetricEvent


@dataclass
class Recovery:
    """One attempt after the first."""

    attempt: int
    at: float | None = None
    """When its first rank started (unix seconds)."""
    reached: float = 0.0
    """The furthest step a rank got to before this attempt."""
    resumed_from: float | None = None
    moved: dict[int, tuple[str, str]] = field(default_factory=dict)
    """rank -> (node before, node now): the ranks this attempt runs elsewhere."""
    world: int | None = None
    """Its ranks, where it has other than the attempt before it (an elastic job that went on with
    fewer nodes, or grew back); None where the count stayed."""
    most: int = 0
    """The most ranks any attempt up to it had."""
    left: dict[int, str] = field(default_factory=dict)
    """rank (in the attempt before) -> its node: the ranks an attempt of fewer ranks went on without."""
    joined: dict[int, str] = field(default_factory=dict)
    """rank -> its node: the ranks an attempt of more ranks grew by."""
    saved: float | None = None
    """The step its snapshot was taken at, where the attempt counts steps otherwise (an elastic run
    whose world size changed: a step is another number of samples); the steps lost count from it."""

    @property
    def lost(self) -> int | None:
        """The steps done again: how far the run had got past the step this attempt resumed from."""
        start = self.saved if self.saved is not None else self.resumed_from
        return None if start is None else max(0, int(self.reached - start))

    def words(self) -> str:
        """``attempt 2 at 10:53:12: rank 1 moved from node A to node B; resumed from step 36 (the run
        got to 40: 4 steps lost)``."""
        when = f" at {time.strftime('%H:%M:%S', time.localtime(self.at))}" if self.at else ""
        parts = [f"attempt {self.attempt + 1}{when}"]
        if self.world is not None:
            parts.append(self._size_words(self.world))
        moves: dict[tuple[str, str], list[int]] = {}
        for rank, pair in sorted(self.moved.items()):
            moves.setdefault(pair, []).append(rank)
        for (before, now), ranks in moves.items():
            parts.append(f"{ranks_words(ranks)} moved from node {before} to node {now}")
        if self.resumed_from is None:
            parts.append("started over (no snapshot to resume from)" if self.at else "starting")
        else:
            lost = self.lost or 0
            saved = f"its snapshot of step {int(self.saved)}; " if self.saved is not None else ""
            parts.append(
                f"resumed from step {int(self.resumed_from)} ({saved}the run got to {int(self.reached)}: "
                f"{lost} step{'' if lost == 1 else 's'} lost)"
            )
        return parts[0] + ": " + "; ".join(parts[1:])

    def _size_words(self, world: int) -> str:
        """``the run went on with 1 rank of 2 (rank 1 left with node A)``, ``grew back to 2 ranks
        (rank 1 on node A)``."""
        ranks = f"{world} rank{'' if world == 1 else 's'}"
        if self.left or not self.joined:
            said = f"the run went on with {ranks} of {self.most}"
            where = [
                f"{ranks_words(r)} left" + (f" with node {n}" if n else "") for n, r in _by_node(self.left).items()
            ]
        else:
            said = f"grew back to {ranks}" if world <= self.most else f"grew to {ranks}"
            where = [
                f"{ranks_words(r)} " + (f"on node {n}" if n else "joined") for n, r in _by_node(self.joined).items()
            ]
        return said + (f" ({'; '.join(where)})" if where else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "at": self.at,
            "reached": self.reached,
            "resumed_from": self.resumed_from,
            "lost": self.lost,
            "saved": self.saved,
            "moved": {str(r): list(pair) for r, pair in sorted(self.moved.items())},
            "world": self.world,
            "most": self.most,
            "left": {str(r): n for r, n in sorted(self.left.items())},
            "joined": {str(r): n for r, n in sorted(self.joined.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recovery:
        moved = _kept_map(data, "moved")
        world = data.get("world")
        return cls(
            int(data["attempt"]),
            _number(data.get("at")),
            _number(data.get("reached")) or 0.0,
            _number(data.get("resumed_from")),
            {int(r): (str(p[0]), str(p[1])) for r, p in moved.items() if isinstance(p, list) and len(p) == 2},
            int(world) if isinstance(world, int) else None,
            int(data.get("most") or 0),
            _rank_nodes(data.get("left")),
            _rank_nodes(data.get("joined")),
            _number(data.get("saved")),
        )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _rank_nodes(kept: object) -> dict[int, str]:
    """``{"1": "node"}`` as kept -> ``{1: "node"}``; what is not that, nothing."""
    if not isinstance(kept, Mapping):
        return {}
    return {int(r): str(n) for r, n in kept.items() if isinstance(r, str) and r.isdigit()}


def _kept_map(kept: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = kept.get(key)
    return value if isinstance(value, Mapping) else {}


def _by_node(ranks: Mapping[int, str]) -> dict[str, list[int]]:
    nodes: dict[str, list[int]] = {}
    for rank, node in sorted(ranks.items()):
        nodes.setdefault(node, []).append(rank)
    return nodes


def ranks_words(ranks: list[int]) -> str:
    """ "rank 1", "ranks 2-3", "ranks 0, 4-7": sorted ranks, runs of them as ranges."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    said = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return f"rank {said}" if len(ranks) == 1 else f"ranks {said}"


def _changed(before: list[str], now: list[str], was: int, world: int) -> tuple[dict[int, str], dict[int, str]]:
    """The ranks an attempt went on without (by their rank before, with their node) and those it grew
    by (by their rank now): by the nodes each attempt's ranks were on, where both said them; else
    the ranks past the smaller count."""
    if before and now:
        left = {r: n for r, n in enumerate(before) if n not in now}
        joined = {r: n for r, n in enumerate(now) if n not in before}
        if left or joined:
            return left, joined
    if world < was:
        return {r: (before[r] if r < len(before) else "") for r in range(world, was)}, {}
    return {}, {r: (now[r] if r < len(now) else "") for r in range(was, world)}


class RecoveryLog:
    """Folds events, oldest first per rank (ranks in any order), into the run's recoveries."""

    def __init__(self) -> None:
        self.attempts: dict[int, Recovery] = {}
        self.nodes: dict[int, list[str]] = {}
        """attempt -> each rank's node, as that attempt's ranks said."""
        self._reached: dict[int, float] = {}
        """rank -> its furthest step in the attempt it is in."""
        self.started: dict[int, float] = {}
        """attempt -> when its first rank started."""
        self.worlds: dict[int, int] = {}
        """attempt -> its ranks, as its lines say."""

    def feed(self, events: Iterable[MetricEvent]) -> None:
        for event in events:
            r = event.record
            count = r.get("restart_count")
            attempt = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0
            if event.event == "start":
                self.started[attempt] = min(self.started.get(attempt, event.time), event.time)
                nodes = r.get("nodes")
                if isinstance(nodes, list) and nodes and (attempt not in self.nodes or event.rank == 0):
                    self.nodes[attempt] = [str(n) for n in nodes]
                if attempt:
                    rec = self.attempts.setdefault(attempt, Recovery(attempt))
                    rec.at = event.time if rec.at is None else min(rec.at, event.time)
                    rec.reached = max(rec.reached, self._reached.get(event.rank, 0.0))
                self._reached[event.rank] = 0.0
            elif event.event == "step" and r.get("source") != "logger" and isinstance(r.get("step"), (int, float)):
                self._reached[event.rank] = max(self._reached.get(event.rank, 0.0), float(r["step"]))
            elif event.event == "resume" and attempt and isinstance(r.get("step"), (int, float)):
                rec = self.attempts.setdefault(attempt, Recovery(attempt))
                step = float(r["step"])
                rec.resumed_from = step if rec.resumed_from is None else min(rec.resumed_from, step)
                saved = r.get("saved_step")
                if isinstance(saved, (int, float)) and not isinstance(saved, bool):
                    rec.saved = float(saved) if rec.saved is None else min(rec.saved, float(saved))
            world = r.get("world_size")  # every line of the built-in trainer's says its attempt's
            if isinstance(world, int) and not isinstance(world, bool) and world > 0:
                self.worlds.setdefault(attempt, world)

    def to_json(self) -> dict[str, Any]:
        """What it has learnt of the attempts (not the ranks' steps in the newest): a status that reads
        only the newest lines of a log is fed on top of it (``from_json``), and keeps what scrolled
        out of those lines since."""
        return {
            "attempts": [self.attempts[a].to_json() for a in sorted(self.attempts)],
            "nodes": {str(a): list(n) for a, n in sorted(self.nodes.items())},
            "worlds": {str(a): w for a, w in sorted(self.worlds.items())},
            "started": {str(a): t for a, t in sorted(self.started.items())},
        }

    @classmethod
    def from_json(cls, kept: object) -> RecoveryLog:
        """A log that knows what ``kept`` says (nothing, where it is not what ``to_json`` wrote)."""
        log = cls()
        if not isinstance(kept, Mapping):
            return log
        attempts = kept.get("attempts")
        try:
            for data in attempts if isinstance(attempts, list) else []:
                rec = Recovery.from_json(data)
                log.attempts[rec.attempt] = rec
            for key, nodes in _kept_map(kept, "nodes").items():
                log.nodes[int(key)] = [str(n) for n in nodes]
            log.worlds.update({int(a): int(w) for a, w in _kept_map(kept, "worlds").items()})
            log.started.update({int(a): float(t) for a, t in _kept_map(kept, "started").items()})
        except (TypeError, ValueError, KeyError, AttributeError):
            return cls()  # not one torchdeck wrote: learnt again from the lines
        return log

    def recoveries(self) -> list[Recovery]:
        """Each attempt after the first, oldest first, with the ranks it moved."""
        out = []
        for attempt in sorted(self.attempts):
            rec = self.attempts[attempt]
            now = self.nodes.get(attempt)
            before = next((self.nodes[a] for a in sorted(self.nodes, reverse=True) if a < attempt), None)
            world = self.worlds.get(attempt)
            was = next((self.worlds[a] for a in sorted(self.worlds, reverse=True) if a < attempt), None)
            rec.most = max([0, *(w for a, w in self.worlds.items() if a < attempt)])
            if world is not None and was is not None and world != was:
                rec.world = world
                rec.left, rec.joined = _changed(before or [], now or [], was, world)
            elif now and before:
                rec.moved = {i: (b, n) for i, (b, n) in enumerate(zip(before, now, strict=False)) if b != n}
            out.append(rec)
        return out

    @property
    def world(self) -> int | None:
        """The ranks of the newest attempt whose start said so."""
        return self.worlds[max(self.worlds)] if self.worlds else None

    def where(self) -> dict[int, str]:
        """Each rank's node in the newest attempt that said so."""
        if not self.nodes:
            return {}
        return dict(enumerate(self.nodes[max(self.nodes)]))

    @property
    def attempt(self) -> int:
        """The newest attempt seen (0: the first)."""
        return max([0, *self.attempts, *self.nodes, *self.started])

    def lines(self) -> list[str]:
        """Each recovery in words, oldest first."""
        return [r.words() for r in self.recoveries()]
