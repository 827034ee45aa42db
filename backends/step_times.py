"""Stragglers with a number: each rank's seconds per step, from the times of its step lines, as a
median and a 95th percentile over its recent steps, a relative score (the fastest rank's median
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
"""Steps per stretch: the individual score compares the newest stretch's median with the best."""
MIN_GAPS = 3
"""Fewer gaps than this say nothing yet (the first steps compile, warm caches, fill loaders)."""


class StepGaps:
    """One rank's recent seconds per step."""

    __slots__ = ("gaps", "at", "best")

    def __init__(self) -> None:
        self.gaps: deque[float] = deque(maxlen=WINDOW)
        self.at: tuple[float, int] | None = None
        """(time, step) of the newest step line."""
        self.best: float | None = None
        """The lowest stretch median seen (kept beyond the window)."""

    def feed(self, time: float, step: int) -> None:
        """A step line: the time it took per step since the last one (a step that went back, a
        restart, starts again from it)."""
        if self.at is not None and step > self.at[1] and time > self.at[0]:
            self.gaps.append((time - self.at[0]) / (step - self.at[1]))
            if len(self.gaps) % STRETCH == 0 or len(self.gaps) == MIN_GAPS:
                stretch = statistics.median(list(self.gaps)[-STRETCH:])
                self.best = stretch if self.best is None else min(self.best, stretch)
        self.at = (time, step)

    def figures(self) -> StepFigures | None:
        if len(self.gaps) < MIN_GAPS:
            return None
        ordered = sorted(self.gaps)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        recent = statistics.median(list(self.gaps)[-STRETCH:])
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
