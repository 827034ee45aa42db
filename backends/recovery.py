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

    @property
    def lost(self) -> int | None:
        """The steps done again: how far the run had got past the step this attempt resumed from."""
        return None if self.resumed_from is None else max(0, int(self.reached - self.resumed_from))

    def words(self) -> str:
        """``attempt 2 at 10:53:12: rank 1 moved from node A to node B; resumed from step 36 (the run
        got to 40: 4 steps lost)``."""
        when = f" at {time.strftime('%H:%M:%S', time.localtime(self.at))}" if self.at else ""
        parts = [f"attempt {self.attempt + 1}{when}"]
        moves: dict[tuple[str, str], list[int]] = {}
        for rank, pair in sorted(self.moved.items()):
            moves.setdefault(pair, []).append(rank)
        for (before, now), ranks in moves.items():
            parts.append(f"{ranks_words(ranks)} moved from node {before} to node {now}")
        if self.resumed_from is None:
            parts.append("started over (no snapshot to resume from)" if self.at else "starting")
        else:
            lost = self.lost or 0
            parts.append(
                f"resumed from step {int(self.resumed_from)} (the run got to {int(self.reached)}: "
                f"{lost} step{'' if lost == 1 else 's'} lost)"
            )
        return parts[0] + ": " + "; ".join(parts[1:])

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "at": self.at,
            "reached": self.reached,
            "resumed_from": self.resumed_from,
            "lost": self.lost,
            "moved": {str(r): list(pair) for r, pair in sorted(self.moved.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recovery:
        moved = data.get("moved") or {}
        return cls(
            int(data["attempt"]),
            data.get("at"),
            float(data.get("reached") or 0.0),
            data.get("resumed_from"),
            {int(r): (str(p[0]), str(p[1])) for r, p in moved.items() if isinstance(p, list) and len(p) == 2},
        )


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

    def recoveries(self) -> list[Recovery]:
        """Each attempt after the first, oldest first, with the ranks it moved."""
        out = []
        for attempt in sorted(self.attempts):
            rec = self.attempts[attempt]
            now = self.nodes.get(attempt)
            before = next((self.nodes[a] for a in sorted(self.nodes, reverse=True) if a < attempt), None)
            if now and before:
                rec.moved = {i: (b, n) for i, (b, n) in enumerate(zip(before, now, strict=False)) if b != n}
            out.append(rec)
        return out

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
