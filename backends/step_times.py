"""Stragglers with a number: each rank's seconds per step, from the times of its step lines, as a
median and a 95th percentile of its paces over five steps among its recent steps, a relative score (the fastest rank's median
over this rank's: 1.0 is the fastest, 0.5 takes twice as long) and an individual score (the
rank's own best stretch over its recent one: 1.0 is as fast as it has been), after NVIDIA's
resiliency extension's straggler scores. The status fold (``events.fold_ranks``) and the
monitor's state (``monitor/state.py``) both keep their gaps here."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

WINDOW = 200
"""The recent steps a rank's figures are made from."""
STRETCH = 10
"""Steps per stretch: the individual score compares the newest stretch's pace with the best."""
SPAN = 5
"""Steps each pace of the median and the p95 spans."""
MIN_GAPS = 3
"""Fewer paces than this say nothing yet (the first steps compile, warm caches, fill loaders)."""


class StepGaps:
    """One rank's recent step lines, as (time, step) points.

    Each figure is a pace over ``SPAN`` steps or more, not over one gap: a script's text lines are
    timed when torchdeck reads them, and lines read together in one burst share a time, which
    makes single gaps zero or many steps long while a few steps' pace stays right."""

    __slots__ = ("points", "best")

    def __init__(self) -> None:
        self.points: deque[tuple[float, int]] = deque(maxlen=WINDOW + 1)
        self.best: float | None = None
        """The lowest stretch pace seen (kept beyond the window)."""

    def feed(self, time: float, step: int) -> None:
        """A step line (a step that went back, a restart, starts the points again)."""
        if self.points and (step < self.points[-1][1] or time < self.points[-1][0]):
            self.points.clear()
        if self.points and step == self.points[-1][1]:
            return
        self.points.append((time, step))
        stretch = self._pace(STRETCH)
        if stretch is not None:
            self.best = stretch if self.best is None else min(self.best, stretch)

    def _pace(self, steps: int, end: int | None = None) -> float | None:
        """Seconds per step over the newest ``steps`` steps before point ``end`` (the last: None)."""
        points = list(self.points)[: None if end is None else end + 1]
        if len(points) < 2:
            return None
        t1, s1 = points[-1]
        for t0, s0 in reversed(points[:-1]):
            if s1 - s0 >= steps:
                return (t1 - t0) / (s1 - s0)
        return None

    def figures(self) -> StepFigures | None:
        points = list(self.points)
        paces = []
        for i in range(len(points)):
            pace = self._pace(SPAN, i)
            if pace is not None:
                paces.append(pace)
        if len(paces) < MIN_GAPS:
            return None
        ordered = sorted(paces)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        recent = self._pace(STRETCH) or paces[-1]
        best = min(self.best, recent) if self.best is not None else recent
        return StepFigures(statistics.median(ordered), p95, best / recent if recent > 0 else 1.0)


@dataclass(frozen=True)
class StepFigures:
    median_s: float
    p95_s: float
    individual: float
    """The rank's best stretch over its newest (1.0: as fast as it has been)."""


def relative_scores(medians: dict[int, float]) -> dict[int, float]:
    """Each rank's relative score: the fastest median over its own."""
    fastest = min((m for m in medians.values() if m > 0), default=0.0)
    return {rank: (fastest / m if m > 0 and fastest else 1.0) for rank, m in medians.items()}
