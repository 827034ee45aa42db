"""Stragglers with a number: each rank's seconds per step, from the times of its step lines, as a
median and a 95th percentile of its paces over five steps among its recent steps, a relative score (the fastest rank's median
over this rank's: 1.0 is the fastest, 0.5 takes twice as long) and an individual score (the
rank's own best stretch over its recent one: 1.0 is as fast as it has been), after NVIDIA's
resiliency extension's straggler scores. The status fold (``events.fold_ranks``) and the
monitor's state (``monitor/state.py``) both keep their gaps here.

Ranks of a synchronous job (DDP) step together: a fast rank waits in the gradients' all-reduce for
a slow one, so their paces are the same and name no straggler. Where the lines say each rank's own
compute (the built-in trainer's ``compute_s``: its model's forward pass, which holds no collective)
the relative score is made from that instead: 1 less the share of each step the rank's slower
compute holds the others back. Either way a rank is scored below 1.0 only where its median is
beyond the fastest rank's own spread (the p95 of its paces, or of its compute): a healthy run's
swings (steps of one rank taking 0.04 s and then 0.4 s on a busy host, or a forward pass of 14 ms
taking 20 while another process has the core) name no rank."""

from __future__ import annotations

import statistics
from array import array
from bisect import bisect_left
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

    __slots__ = ("_times", "_steps", "_fed", "_paces_from", "_paces_s", "_stretch", "best", "compute", "_figures")

    def __init__(self) -> None:
        self._times = array("d")
        self._steps = array("d")  # (a float each: a line may say any integer)
        """The points, in two arrays (kept up to twice ``WINDOW``, then cut back to the newest):
        a monitor of 1,024 ranks holds 200 of them a rank for hours, and as tuples of a float and an
        int they took 22 MB, and pinned the allocator's pools around them."""
        self._fed = 0
        """Points fed since the last restart: the newest one's number is ``_fed - 1``."""
        self._paces_s = array("d")
        self._paces_from = array("q")
        """The pace ending at each point that has one, and the number of the point ``SPAN`` steps
        or more before it where it starts (kept as the points are): made once, as its point comes.
        A monitor of 1,024 ranks that made every rank's paces again at each of its new steps spent
        a tenth of a core so."""
        self._stretch: float | None = None
        """The newest point's pace over ``STRETCH`` steps or more (None: the window has no point
        that far back)."""
        self.best: float | None = None
        """The lowest stretch pace seen (kept beyond the window)."""
        self.compute: deque[float] = deque(maxlen=WINDOW)
        """The rank's own compute seconds of its recent step lines, where they say it."""
        self._figures: StepFigures | None | bool = False
        """``figures()`` as last made (False: a point came since): a monitor of 1,024 ranks asks
        for every rank's twenty times a second, and most have no new step between two asks."""

    @property
    def points(self) -> list[tuple[float, float]]:
        """The newest ``WINDOW`` + 1 points, as (time, step)."""
        return list(zip(self._times[-(WINDOW + 1) :], self._steps[-(WINDOW + 1) :]))

    def feed(self, time: float, step: int, compute_s: object = None) -> None:
        """A step line (a step that went back, a restart, starts the points again), with the rank's
        own compute seconds where the line says them."""
        times, steps = self._times, self._steps
        if steps and (step < steps[-1] or time < times[-1]):
            del times[:], steps[:]
            self.compute.clear()
            del self._paces_s[:], self._paces_from[:]
            self._fed = 0
        if steps and step == steps[-1]:
            return
        if isinstance(compute_s, (int, float)) and not isinstance(compute_s, bool) and compute_s > 0:
            self.compute.append(float(compute_s))
        times.append(time)
        steps.append(step)
        self._fed += 1
        # In one pass back over the window (the steps only grow: at most STRETCH points), the pace
        # ending here from the newest point at least SPAN steps back, and the stretch's pace from
        # the newest at least STRETCH back (the best kept).
        oldest, paced, self._stretch = max(0, len(steps) - (WINDOW + 1)), False, None
        for i in range(len(steps) - 2, oldest - 1, -1):
            behind = step - steps[i]
            if not paced and behind >= SPAN:
                self._paces_from.append(self._fed - len(steps) + i)
                self._paces_s.append((time - times[i]) / behind)
                paced = True
            if behind >= STRETCH:
                self._stretch = stretch = (time - times[i]) / behind
                self.best = stretch if self.best is None else min(self.best, stretch)
                break
        if len(steps) > 2 * (WINDOW + 1):
            del times[: -(WINDOW + 1)], steps[: -(WINDOW + 1)]
            del self._paces_s[: -(WINDOW + 1)], self._paces_from[: -(WINDOW + 1)]
        self._figures = False

    def _paces(self) -> list[float]:
        """The pace over ``SPAN`` steps or more ending at each of the newest ``WINDOW`` + 1 points,
        from the newest point that far back among them (a pace whose start has left them is not)."""
        return self._paces_s[bisect_left(self._paces_from, self._fed - (WINDOW + 1)) :].tolist()

    def figures(self) -> StepFigures | None:
        if self._figures is False:
            self._figures = self._made()
        return self._figures if isinstance(self._figures, StepFigures) else None

    def _made(self) -> StepFigures | None:
        paces = self._paces()
        if len(paces) < MIN_GAPS:
            return None
        ordered = sorted(paces)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        recent = self._stretch or paces[-1]
        best = min(self.best, recent) if self.best is not None else recent
        compute, compute_p95 = None, None
        if len(self.compute) >= MIN_GAPS:
            computes = sorted(self.compute)
            compute = statistics.median(computes)
            compute_p95 = computes[min(len(computes) - 1, int(0.95 * len(computes)))]
        half = len(ordered) // 2  # the median, as statistics.median makes it (without sorting again)
        median = ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
        return StepFigures(median, p95, best / recent if recent > 0 else 1.0, compute, compute_p95)


@dataclass(frozen=True)
class StepFigures:
    median_s: float
    p95_s: float
    individual: float
    """The rank's best stretch over its newest (1.0: as fast as it has been)."""
    compute_s: float | None = None
    """The median of its own compute seconds, where its lines say them."""
    compute_p95_s: float | None = None
    """Their 95th percentile: the spread a rank's own compute has on this host now."""


COMPUTE_PER_FORWARD = 3.0
"""A training step's compute over its forward pass's: the backward pass takes about twice the
forward's arithmetic (the usual rule: 2 FLOPs a parameter a sample forward, 4 backward)."""


def held_back(figures: StepFigures, fastest_compute: float) -> float:
    """The share of each step the run would save were this rank's compute as fast as
    ``fastest_compute`` (the fastest rank's, to the top of its spread): its forward's excess,
    times ``COMPUTE_PER_FORWARD``, over the step (0 to 1)."""
    excess = COMPUTE_PER_FORWARD * ((figures.compute_s or 0.0) - fastest_compute)
    return min(1.0, max(0.0, excess / figures.median_s)) if figures.median_s > 0 else 0.0


def relative_scores(figures: dict[int, StepFigures]) -> dict[int, float]:
    """Each rank's relative score. Where every rank says its compute: 1 less the share of each step
    its slower compute holds every rank back (``held_back``): a rank whose forward pass is twice
    the fastest's but a sliver of a step long costs the run little, and scores near 1.0. Else the
    fastest median pace over its own. Either way 1.0 where the rank's median is within the fastest
    rank's own spread (under that rank's p95): on a host whose other work takes the cores from one
    rank and then the other, two healthy ranks' medians differ by as much as one rank's own steps
    do, and neither is a straggler. Past it, a rank's compute holds the others back by what is
    beyond that spread (from the spread, not the fastest median: a score that fell from 1.0 to
    0.15 as a median crossed the p95 would flap poll after poll on a rank at the edge)."""
    if figures and all(f.compute_s for f in figures.values()):
        top = min(figures.values(), key=lambda f: f.compute_s or 0.0)
        spread = max(top.compute_p95_s or 0.0, top.compute_s or 0.0)
        return {rank: 1.0 - held_back(f, spread) for rank, f in figures.items()}
    paced = {rank: f for rank, f in figures.items() if f.median_s > 0}
    if not paced:
        return {rank: 1.0 for rank in figures}
    top = min(paced.values(), key=lambda f: f.median_s)
    return {
        rank: (top.median_s / f.median_s if f.median_s > 0 and f.median_s > top.p95_s else 1.0)
        for rank, f in figures.items()
    }
