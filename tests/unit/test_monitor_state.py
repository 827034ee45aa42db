"""The monitor's model: curves stay bounded, stragglers and silent ranks are
flagged, restarts and ETA come from the stream. Fed by a recorded real run
and by hand-made events where a situation must be exact."""

from __future__ import annotations

from tui_support import RECORDED, RECORDED_RUN

from torchdeck.backends.base import MetricEvent
from torchdeck.backends.events import parse_metric_line
from torchdeck.monitor.state import MonitorState, Series, format_duration


def recorded_events() -> list[MetricEvent]:
    metrics = RECORDED / RECORDED_RUN / "metrics"
    events = []
    for path in sorted(metrics.glob("rank-*.jsonl")):
        events += [e for e in map(parse_metric_line, path.read_bytes().splitlines()) if e is not None]
    return sorted(events, key=lambda e: e.time)


def step(rank, n, t, loss=1.0, sps=1000.0):
    rec = {"event": "step", "rank": rank, "step": n, "epoch": 1, "loss": loss, "samples_per_s": sps, "time": t}
    return MetricEvent("step", rank, t, rec)


def test_series_stays_bounded_and_keeps_the_mean():
    s = Series(cap=100)
    for i in range(100_000):
        s.add(i, float(i % 10))
    xs, ys = s.points()
    assert len(xs) <= 101
    assert abs(sum(ys) / len(ys) - 4.5) < 0.05  # averaging keeps the level
    assert list(xs) == sorted(xs)
    assert xs[-1] == 99_999


def test_a_runs_curves_keep_no_python_object_per_point():
    """128 ranks' curves, full (399 points each, steps past 256): the allocator's count of small
    blocks barely moves. Kept as lists of floats they held 51,000 long-lived objects,
    scattered among the short-lived ones of the lines they came from, and the memory around them
    could not be given back (the metric reader's memory crept up about 1 MB a minute)."""
    import gc
    import pickle
    import sys

    series = [Series() for _ in range(128)]
    gc.collect()
    before = sys.getallocatedblocks()
    for step in range(1000, 1399):  # one short of the halving
        for i, s in enumerate(series):
            s.add(step, 2.3 * 0.999**step + i * 1e-4)
    gc.collect()
    assert all(len(s.points()[0]) == 399 for s in series)
    assert sys.getallocatedblocks() - before < 2_000  # as lists of floats: 51,800
    xs, ys = pickle.loads(pickle.dumps(series[5].points()))  # as the metric reader sends them
    assert list(xs) == [float(x) for x in range(1000, 1399)] and ys[0] == 2.3 * 0.999**1000 + 5e-4


def test_recorded_run_gives_progress_evals_and_a_restart():
    state = MonitorState()
    events = recorded_events()
    state.ingest(events)
    snap = state.snapshot(now=events[-1].time)
    assert snap.world_size == 2 and snap.epochs == 4 and snap.total_steps == 80
    assert snap.step == 80 and snap.fraction == 1.0
    assert snap.restarts == 1  # rank 1 was killed once
    assert [e for e, _ in snap.evals] == [1, 2, 3, 4]
    assert snap.best_accuracy == max(a for _, a in snap.evals) > 0.5
    assert set(snap.curves) == {0, 1} and all(len(xs) > 10 for xs, _ in snap.curves.values())
    assert snap.done is not None and snap.eta_s is None
    assert [r.flag for r in snap.ranks] == ["done", "done"]


def test_slow_rank_is_flagged_within_a_few_steps():
    state = MonitorState(straggler_ratio=0.75)
    t = 1000.0
    for n in range(1, 6):
        state.ingest([step(r, n, t + n * 0.1, sps=1000.0 if r != 3 else 400.0) for r in range(4)])
    snap = state.snapshot(now=t + 0.6)
    assert snap.stragglers == [3]
    flags = {r.rank: r.flag for r in snap.ranks}
    assert flags == {0: "", 1: "", 2: "", 3: "slow"}


def test_rank_that_stops_reporting_is_flagged_silent():
    state = MonitorState()
    t = 1000.0
    for n in range(1, 30):
        ranks = range(2) if n < 10 else [0]  # rank 1 stops at step 9
        state.ingest([step(r, n, t + n * 0.5) for r in ranks])
    snap = state.snapshot(now=t + 15)
    assert snap.silent == [1]
    row = next(r for r in snap.ranks if r.rank == 1)
    assert row.flag == "silent" and "no line for 10 s" in row.detail
    # ...and a whole job gone quiet (a hung collective) is noticed too
    assert state.snapshot(now=t + 14.5 + 30).quiet_s is not None


def test_eta_from_recent_step_rate():
    state = MonitorState()
    state.ingest(
        [MetricEvent("start", 0, 0.0, {"event": "start", "rank": 0, "total_steps": 100, "epochs": 1, "world_size": 1})]
    )
    state.ingest([step(0, n, 100.0 + n) for n in range(1, 11)])  # one step a second
    assert abs(state.snapshot(now=110.0).eta_s - 90.0) < 1e-6


def test_error_lines_are_kept_with_their_hint():
    state = MonitorState()
    rec = {"event": "error", "rank": 1, "message": "data dir x does not exist", "hint": "pass --download"}
    state.ingest([MetricEvent("error", 1, 5.0, rec)])
    snap = state.snapshot(now=6.0)
    assert snap.errors == ["rank 1: data dir x does not exist (pass --download)"]
    assert snap.ranks[0].flag == "error"


def test_format_duration():
    assert [format_duration(x) for x in (None, 9, 125, 3725)] == ["-", "9s", "2m05s", "1h02m"]


def test_gpu_utilization_the_ranks_report_is_grouped_by_host():
    state = MonitorState()
    events = []
    for rank, host, util in ((0, "pod-a", 97.0), (1, "pod-a", 95.0), (2, "pod-b", 40.0), (3, "pod-b", None)):
        ev = step(rank, 1, 10.0)
        ev.record.update(host=host, gpu_util=util)
        events.append(ev)
    state.ingest(events)
    assert state.snapshot(now=11.0).gpu_by_host == {"pod-a": [(0, 97.0), (1, 95.0)], "pod-b": [(2, 40.0)]}


def test_a_quiet_spell_is_weighed_by_what_the_ranks_are_doing():
    """Issue 31: a Lightning epoch that reports once at its end is no hang while its ranks work."""
    from torchdeck.backends.base import GpuMetrics, NodeMetrics, ProcessMetrics
    from torchdeck.monitor.state import quiet_words

    def node(cpu: list[float], gpu: tuple[float, ...] = ()) -> NodeMetrics:
        procs = [ProcessMetrics(rank, 100 + rank, c, 500.0) for rank, c in enumerate(cpu)]
        gpus = [GpuMetrics(i, "A10G", u, 1.0, 2.0) for i, u in enumerate(gpu)]
        return NodeMetrics("n0", 50.0, 8, 1.0, 2.0, gpus=gpus, processes=procs)

    assert quiet_words(85, [node([98.0, 97.0])]) == ("no metric line for 85 s; ranks busy at 98% CPU", False)
    wrapped = node([98.0, 97.0])  # each rank's script beside its idle wrapper, as the local backend runs them
    wrapped.processes += [ProcessMetrics(rank, 200 + rank, 0.0, 14.0) for rank in (0, 1)]
    assert quiet_words(85, [wrapped]) == ("no metric line for 85 s; ranks busy at 98% CPU", False)
    words, alarm = quiet_words(85, [node([0.5, 1.0], gpu=(0.0,))])
    assert alarm and words == "no metric line for 85 s; ranks idle at 1% CPU and 0% GPU (hung collective?)"
    assert quiet_words(85, [node([2.0], gpu=(95.0,))])[1] is False  # the GPU works while the CPU waits on it
    assert quiet_words(85, []) == ("no rank has written for 85 s (hung collective?)", True)  # nothing measured


def test_a_run_with_nothing_readable_after_a_minute_says_what_torchdeck_looks_for():
    from torchdeck.monitor.state import unread_words

    state = MonitorState()
    state.ingest([MetricEvent("start", 0, 1000.0, {"event": "start", "rank": 0, "time": 1000.0})])
    assert unread_words(state.snapshot(now=1030.0), 1030.0) is None  # not yet a minute
    said = unread_words(state.snapshot(now=1075.0), 1075.0)
    assert said is not None and said.startswith("nothing readable after 75 s") and "metrics.pattern" in said
    state.ingest([MetricEvent("step", 0, 1076.0, {"event": "step", "rank": 0, "step": 1, "loss": 2.0})])
    assert unread_words(state.snapshot(now=1080.0), 1080.0) is None


def test_the_node_panel_tells_eks_nodes_apart_by_their_host_part():
    """EKS names a node by its private address and domain; two nodes of one subnet share their first
    14 characters, which the panel once cut every name to."""
    from torchdeck.backends.base import NodeMetrics
    from torchdeck.tui.glyphs import glyphs_for
    from torchdeck.tui.widgets.node_bars import NodeBars, short_node_name

    assert short_node_name("ip-192-168-12-34.ec2.internal") == "ip-192-168-12-34"
    assert short_node_name("ip-10-0-1-7.us-west-2.compute.internal") == "ip-10-0-1-7"
    assert short_node_name("10.0.1.7") == "10.0.1.7" and short_node_name("cpu-0") == "cpu-0"
    drawn: list[str] = []

    class Panel(NodeBars):  # what it would draw (no app runs here to draw it)
        def update(self, content="", *, layout=True):
            drawn.append(str(content))

    panel = Panel(glyphs_for(ascii_only=True))
    nodes = [NodeMetrics(f"ip-192-168-12-{n}.ec2.internal", 50.0, 8, 1.0, 2.0) for n in (34, 35)]
    panel.show(nodes, 120)
    (shown,) = drawn
    assert "ip-192-168-12-34 " in shown and "ip-192-168-12-35 " in shown, shown


def test_an_elastic_run_gone_on_with_fewer_ranks_shows_the_rest_as_left_not_silent_and_takes_them_back():
    """Rank 0's start of attempt 2 says one rank: rank 1, quiet since, is out of the run (``left``),
    neither silent nor slow, and its curve stops; its start of attempt 3 takes it back, its curve
    going on from the step it resumed at."""
    state = MonitorState(clock=lambda: 100.0)

    def start(rank: int, t: float, world: int, attempt: int) -> MetricEvent:
        return MetricEvent("start", rank, t, {"world_size": world, "restart_count": attempt})

    state.ingest([start(0, 0.0, 2, 0), start(1, 0.0, 2, 0)])
    state.ingest([step(r, n, n * 0.1, loss=2.0 - n / 100) for n in range(1, 30) for r in (0, 1)])
    state.ingest([start(0, 10.0, 1, 1), *[step(0, n, 10 + n, loss=1.5) for n in range(20, 90)]])
    snap = state.snapshot()
    rows = {r.rank: r for r in snap.ranks}
    assert (snap.world_size, snap.world_most) == (1, 2)
    assert rows[1].flag == "left" and "goes on with 1" in rows[1].detail and snap.silent == []
    assert list(snap.curves[1][0])[-1] == 29.0  # its curve stops where it left
    state.ingest([start(1, 95.0, 2, 2), start(0, 95.0, 2, 2), step(1, 80, 96.0), step(0, 80, 96.0)])
    snap = state.snapshot()
    assert (snap.world_size, snap.world_most) == (2, 2) and {r.flag for r in snap.ranks} <= {""}
    assert list(snap.curves[1][0])[-1] == 80.0
