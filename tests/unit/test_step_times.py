"""Stragglers with a number (issue 44): each rank's seconds per step as a median and a p95, its
relative score against the fastest rank and its individual score against its own best, in the
status fold (``status --output json``), the monitor's state and its rank table."""

from __future__ import annotations

from torchdeck.backends.base import MetricEvent
from torchdeck.backends.events import fold_ranks
from torchdeck.backends.step_times import StepGaps
from torchdeck.monitor.state import MonitorState
from torchdeck.tui.widgets.rank_table import row_cells


def steps(
    rank: int, seconds_per_step: float, n: int = 30, start: float = 1000.0, sps: bool = False
) -> list[MetricEvent]:
    out = []
    for i in range(1, n + 1):
        t = start + i * seconds_per_step
        rec = {"event": "step", "rank": rank, "step": i, "epoch": 1, "loss": 1.0, "time": t}
        out.append(MetricEvent("step", rank, t, rec))
    return out


def test_a_rank_twice_as_slow_scores_one_half_and_a_rank_that_slowed_scores_below_its_best():
    events = steps(0, 0.1) + steps(1, 0.1) + steps(2, 0.2) + steps(3, 0.1)
    ranks = fold_ranks(sorted(events, key=lambda e: e.time))
    assert [ranks[r].relative_score for r in range(4)] == [1.0, 1.0, 0.5, 1.0]
    assert ranks[2].step_s_median == 0.2 and ranks[2].step_s_p95 == 0.2 and ranks[2].individual_score == 1.0
    # a rank that went from 0.1 s to 0.3 s a step: a third of its own best
    gaps = StepGaps()
    for i in range(1, 31):
        gaps.feed(1000 + i * 0.1, i)
    for i in range(31, 51):
        gaps.feed(1003 + (i - 30) * 0.3, i)
    figures = gaps.figures()
    assert figures is not None and round(figures.individual, 2) == 0.33 and round(figures.p95_s, 6) == 0.3


def test_a_restart_or_too_few_steps_say_nothing_yet():
    gaps = StepGaps()
    gaps.feed(10.0, 5)
    gaps.feed(11.0, 6)
    gaps.feed(12.0, 1)  # a restart: from step 1 again
    assert gaps.figures() is None


def test_the_monitor_flags_the_slow_rank_by_its_step_times_and_the_table_shows_the_scores():
    """Ranks that print no samples per second (a user's script) are flagged by their pace alone,
    with the numbers and what differs (its node)."""
    state = MonitorState(straggler_ratio=0.75, clock=lambda: 1007.0)
    events = steps(0, 0.1) + steps(1, 0.1) + steps(2, 0.25) + steps(3, 0.1)
    for e in events:
        e.record["host"] = "node-b" if e.rank == 2 else "node-a"
        e.record["gpu_util"] = 40.0 if e.rank == 2 else 95.0
    state.ingest(sorted(events, key=lambda e: e.time))
    snap = state.snapshot()
    assert snap.stragglers == [2]
    row = snap.ranks[2]
    assert row.flag == "slow" and round(row.relative, 6) == 0.4
    assert row.detail.startswith("40% of the fastest pace (0.25 s/step, p95 0.25 s); 100% of its own best")
    assert "GPU 40% (others 95%)" in row.detail and "the only rank on node-b" in row.detail
    assert row_cells(snap.ranks[0])[-1] == "1.00" and row_cells(row)[-1] == "SLOW"


def test_a_slow_rank_that_waits_on_its_data_loader_or_burns_cpu_says_so():
    """The built-in trainer's step lines carry data_s, step_s and cpu_util: the rank that spends
    most of each step waiting for its batch is flagged with that, and with its CPU against the others'."""
    state = MonitorState(straggler_ratio=0.75, clock=lambda: 1007.0)
    events = steps(0, 0.1) + steps(1, 0.1) + steps(2, 0.25) + steps(3, 0.1)
    for e in events:
        slow = e.rank == 2
        e.record.update(step_s=0.25 if slow else 0.1, data_s=0.15 if slow else 0.01, cpu_util=35.0 if slow else 98.0)
    state.ingest(sorted(events, key=lambda e: e.time))
    row = state.snapshot().ranks[2]
    assert row.flag == "slow"
    assert "waits on its data loader 60% of each step (others 10%)" in row.detail
    assert "CPU 35% (others 98%)" in row.detail
    assert "data loader" not in state.snapshot().ranks[0].detail


def test_lines_read_in_bursts_still_give_the_pace():
    """A script's text lines are timed when torchdeck reads them; read four at a time (a loaded
    host), single gaps are zero or four steps long, and the pace over five steps is still near."""
    gaps = StepGaps()
    for i in range(1, 61):
        gaps.feed(1000 + ((i + 3) // 4) * 4 * 0.2, i)  # 0.2 s a step, read every fourth
    figures = gaps.figures()
    assert figures is not None and 0.15 <= figures.median_s <= 0.25
