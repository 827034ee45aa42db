"""Runs compared (``monitor/compare.py``) from their digests (``backends/run_digest.py``): runs of
different lengths and rank counts, a run still running, a failed run; curves bounded however long
a run; the digest file read back as it was; what differs in the specs; and money as people write
it (``backends/cost.py``)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from torchdeck.backends.base import JobState, JobStatus, MetricEvent
from torchdeck.backends.cost import CostLine, NodeUse, PriceBook, RunCost, dollars, money, price_run
from torchdeck.backends.run_digest import MEAN_POINTS, BucketCurve, RunDigest
from torchdeck.backends.spec import spec_from_dict
from torchdeck.monitor.compare import ComparedRun, Comparison, argument_pairs, format_rows, labels


def steps(rank, count, loss_at, start=1, **extra):
    return [
        MetricEvent("step", rank, float(s), {"step": s, "loss": loss_at(s), **extra}) for s in range(start, count + 1)
    ]


def run(run_id, state, ranks, count, loss_at, args=(), cost=None, evals=()):
    digest = RunDigest(run_id)
    for r in range(ranks):
        digest.ingest(steps(r, count, lambda s, r=r: loss_at(s) + 0.01 * r, samples_per_s=100.0))
    for step, val, acc in evals:
        digest.ingest([MetricEvent("eval", 0, 0.0, {"step": step, "epoch": 1, "loss": val, "accuracy": acc})])
    status = JobStatus(run_id, "t", "local", state, ranks, 1000.0, None if state is JobState.RUNNING else 1100.0)
    status.cost = cost
    spec = spec_from_dict({"entrypoint": {"script": "train.py", "args": list(args)}, "nproc_per_node": ranks})
    return ComparedRun(status, spec, digest)


def test_runs_of_different_lengths_rank_counts_and_states_compare_where_all_reached():
    paid = RunCost([CostLine("1 x g5.xlarge", 0.5, 1.0, "table")])
    fast = run("lr-a", JobState.SUCCEEDED, 2, 300, lambda s: 2.0 / s, ["--lr", "0.1"], paid, [(300, 0.9, 0.8)])
    slow = run("lr-b", JobState.FAILED, 4, 120, lambda s: 3.0 / s, ["--lr", "0.01"], evals=[(100, 1.5, 0.5)])
    live = run("lr-c", JobState.RUNNING, 1, 50, lambda s: 2.5 / s, ["--lr=0.05"])
    comparison = Comparison([fast, slow, live], now=1160.0)
    assert comparison.common_step == 50
    rows = {r.name: r for r in comparison.rows()}
    assert rows["state"].cells == ["succeeded", "failed", "running"]
    assert rows["ranks"].cells == ["2", "4", "1"] and rows["steps"].cells == ["300", "120", "50"]
    # at step 50, which all reached, the first learned fastest: its mean loss there is lowest
    assert rows["loss @ 50"].best == 0 and float(rows["loss @ 50"].cells[0]) == pytest.approx(
        2.0 / 50 + 0.005, abs=1e-3
    )
    assert rows["wall time"].cells == ["1m40s", "1m40s", "2m40s"]  # a running run: until now
    assert rows["best acc"].cells == ["80.0%", "50.0%", "-"] and rows["best acc"].best == 0
    assert rows["samples/s"].cells == ["200", "400", "100"]  # the ranks' speeds added up
    assert rows["args --lr"].cells == ["0.1", "0.01", "0.05"] and rows["args --lr"].spec
    assert rows["nproc_per_node"].cells == ["2", "4", "1"]
    assert "name" not in rows and rows["cost"].cells == ["$0.50", "-", "-"]
    text = format_rows(comparison.rows(), [r.label for r in comparison.runs])
    assert "differs in the spec:" in text and "0.0450*" in text

    curves, names = comparison.rank_curves(limit=5)
    assert names == ["a:r0", "b:r0", "c:r0", "a:r1", "b:r1"] and len(curves) == 5
    json_out: Any = comparison.to_json(points=20)
    assert json_out["differs"]["args --lr"] == ["0.1", "0.01", "0.05"]
    assert len(json_out["runs"][0]["curve"]["step"]) <= 20 and json_out["runs"][2]["state"] == "running"


def test_a_curve_stays_bounded_and_keeps_its_shape_in_any_order():
    curve = BucketCurve(cap=100)
    pairs = [(s, 10.0 / s) for s in range(1, 20001)]
    for x, y in reversed(pairs):  # order does not matter
        curve.add(x, y)
    xs, ys = curve.points()
    shape: Any = curve.to_json()
    assert len(xs) <= 100 and list(xs) == sorted(xs)
    assert ys[0] > ys[-1] and math.isclose(
        sum(y * n for y, n in zip(shape["y"], shape["n"])), sum(y for _, y in pairs), rel_tol=1e-9
    )


def test_a_digest_reads_back_as_it_was_written():
    digest = RunDigest("r")
    for r in range(3):
        digest.ingest(steps(r, 5000, lambda s: 1.0 / s, steps_per_s=5.0))
    digest.ingest([MetricEvent("stopped", 0, 0.0, {"step": 5000})])
    digest.complete = True
    again = RunDigest.from_bytes(digest.to_bytes())
    assert again is not None and again.complete and again.stopped
    assert again.summary() == digest.summary() and len(again.mean) <= MEAN_POINTS
    assert list(again.mean_curve()[1]) == pytest.approx(list(digest.mean_curve()[1]))
    assert again.summary()["speed_unit"] == "steps/s"
    assert RunDigest.from_bytes(b"{not json") is None and RunDigest.from_bytes(b'{"version": 99}') is None


def test_what_differs_ignores_the_run_s_own_folder_and_labels_tell_runs_apart():
    a, b = (
        run("cifar-1125-0001", JobState.SUCCEEDED, 1, 5, lambda s: 1.0),
        run("cifar-1125-0002", JobState.SUCCEEDED, 1, 5, lambda s: 1.0),
    )
    a.spec.data_dir, b.spec.data_dir = "/state/runs/cifar-1125-0001/data", "/state/runs/cifar-1125-0002/data"
    assert Comparison([a, b]).differing() == {}
    assert labels(["cifar-1125-0001", "cifar-1125-0002"]) == ["0001", "0002"]
    # nothing shared at the start: the job's name and the id's time (the day left out), not the name's tail
    assert labels(["cifar10-1125-041609", "train-1125-041542"]) == ["cifar10~041609", "train~041542"]
    assert labels(["resnet50-imagenet-large-1125-041609-2", "x-1125-041542"]) == ["resnet5~041609-2", "x-1125-041542"]
    assert labels(["a-quite-long-imported-job-name", "short"]) == [
        "a-quite-l~b-name",
        "short",
    ]  # not a run id of ours: its head and tail
    assert argument_pairs(["--lr", "0.1", "--amp", "--wd=-1e-4", "data/", "--m", "-3"]) == {
        "args --lr": "0.1",
        "args --amp": "yes",
        "args --wd": "-1e-4",
        "args 1": "data/",
        "args --m": "-3",
    }


@pytest.mark.parametrize(
    "text, expected", [(12.5, 12.5), ("12.50", 12.5), ("$1,200", 1200.0), ("7 USD", 7.0), ("$0.40", 0.4)]
)
def test_money_as_people_write_it(text, expected):
    assert money(text) == expected


@pytest.mark.parametrize("bad", ["lots", -1, float("nan"), "$inf", True, [5], "$", 10**400])
def test_money_refuses_what_is_not_an_amount(bad):
    with pytest.raises(ValueError, match="USD"):
        money(bad)


def test_prices_come_from_the_spec_then_the_table_then_the_settings_and_unknown_says_so():
    use = NodeUse("n1", 0.0, 3600.0, instance_type="m5.large")
    assert PriceBook().price(use) == (0.096, "on-demand price table")
    assert PriceBook(override=1.0).price(use)[0] == 1.0
    spot = NodeUse("n2", 0.0, 3600.0, instance_type="m5.large", capacity="spot")
    assert PriceBook().price(spot)[1].startswith("spot counted at the on-demand price")
    odd = NodeUse("n3", 0.0, 7200.0, instance_type="z1.odd", share=0.5)
    cost = price_run([use, odd], PriceBook(), budget=1.0)
    assert cost.amount is None and "z1.odd is not in torchdeck's price table" in cost.unknown and cost.cell() == "?"
    cost = price_run([use, odd], PriceBook(fallback=0.5), budget=1.0)
    assert cost.amount == pytest.approx(0.096 + 0.5) and cost.share == pytest.approx(0.596)
    assert RunCost.from_dict(cost.to_dict()).to_dict() == cost.to_dict()
    unpriced = RunCost([CostLine("1 x this machine", 1.0, None, "no price")], budget=2.0)
    assert unpriced.priced(0.25, "setting").amount == 0.25


@pytest.mark.parametrize(
    "amount, shown",
    [(0.0166, "$0.017"), (0.0014, "$0.0014"), (0.096, "$0.096"), (0.5, "$0.50"), (0.01, "$0.01"), (1234, "$1,234.00")],
)
def test_an_amount_shows_enough_figures_to_tell_it_from_its_budget(amount, shown):
    # 83% of a $0.02 budget once read "$0.02 of $0.02"
    assert dollars(amount) == shown


def test_a_run_and_its_restart_are_one_line_that_drops_the_steps_the_restart_did_again():
    """The first run saved at step 100 and got to 130 before its node went; the restart resumed
    from 100 and went on to 200. One line: the first run's 1..100, then the restart's 101..200;
    30 steps lost; the wall time from the first start, the costs added."""
    from torchdeck.backends.run_digest import lost_steps, restart_words

    first = run("job-a", JobState.FAILED, 2, 130, lambda s: 5.0)  # a loss the restart never had
    first.digest.ingest(
        [MetricEvent("checkpoint", 0, 0.0, {"step": 50}), MetricEvent("checkpoint", 0, 0.0, {"step": 100})]
    )
    first.status.cost = RunCost([CostLine("2 x g5.xlarge", 1.0, 0.5, "table")])
    later = run("job-b", JobState.SUCCEEDED, 2, 0, lambda s: 1.0)
    for rank in range(2):
        later.digest.ingest([MetricEvent("resume", rank, 0.0, {"step": 100, "restart_count": 0})])
        later.digest.ingest(steps(rank, 200, lambda s: 1.0, start=101))
    later.status.submitted_at, later.status.finished_at = 1200.0, 1500.0
    later.status.cost = RunCost([CostLine("2 x g5.xlarge", 1.0, 0.25, "table")])
    assert (first.digest.checkpoint_step, later.digest.resumed_at) == (100.0, 100.0)
    assert lost_steps(first.digest, later.digest) == 30
    assert restart_words(130, 100) == "from step 100 (the run got to 130: 30 steps lost)"
    assert restart_words(130, None).endswith("the steps lost are not known)")

    joined = first.digest.then(later.digest)
    xs, ys = joined.mean_curve()
    assert list(xs) == [float(s) for s in range(1, 201)]  # no step twice, none of 101..130 from the first
    assert all(y == pytest.approx(5.005) for x, y in zip(xs, ys) if x <= 100)
    assert all(y == pytest.approx(1.0) for x, y in zip(xs, ys) if x > 100)
    assert joined.max_step == 200 and joined.summary()["final_loss"] == pytest.approx(1.0)
    again = RunDigest.from_bytes(joined.to_bytes())
    assert again is not None and again.resumed_at is None and again.checkpoint_step == 100.0

    later.earlier, later.digest = [first], joined
    alone = run("job-c", JobState.SUCCEEDED, 2, 200, lambda s: 1.0)
    comparison = Comparison([later, alone])
    rows = {r.name: r for r in comparison.rows()}
    assert rows["restarts"].cells == ["1", "0"] and rows["steps lost"].cells == ["30", "0"]
    assert rows["wall time"].cells[0] == "8m20s"  # 1000 s to 1500 s: from the first run's start
    assert rows["cost"].cells[0] == "$0.75"
    figures = comparison.figures(later)
    assert figures["restarts"] == ["job-a"] and figures["steps_lost"] == 30 and "resumes" not in rows


def test_a_recovery_inside_a_run_is_folded_from_any_ranks_order_kept_and_joined_through_a_resume():
    """Rank 1's new pod's events may be read before rank 0's: the attempt, where ranks moved (rank 0's
    gathered nodes), the step resumed from and the steps done again come out the same; a kept digest
    reads them back; a run resumed from this one carries them into its line."""
    nodes0, nodes1 = ["a", "b"], ["a", "c"]
    rank0 = [MetricEvent("start", 0, 0.0, {"restart_count": 0, "nodes": nodes0}), *steps(0, 40, lambda s: 1.0)]
    rank0 += [MetricEvent("start", 0, 100.0, {"restart_count": 1, "nodes": nodes1})]
    rank0 += [MetricEvent("resume", 0, 101.0, {"restart_count": 1, "step": 36}), *steps(0, 50, lambda s: 1.0, start=37)]
    rank1 = [MetricEvent("start", 1, 99.0, {"restart_count": 1, "nodes": nodes1})]
    rank1 += [MetricEvent("resume", 1, 101.0, {"restart_count": 1, "step": 36}), *steps(1, 50, lambda s: 1.0, start=37)]
    for order in ([rank0, rank1], [rank1, rank0]):
        digest = RunDigest("r")
        for events in order:
            digest.ingest(events)
        (rec,) = digest.recoveries
        assert (rec.attempt, rec.at, rec.reached, rec.resumed_from, rec.lost) == (1, 99.0, 40.0, 36.0, 4)
        assert rec.moved == {1: ("b", "c")}
        assert (
            "rank 1 moved from node b to node c; resumed from step 36 (the run got to 40: 4 steps lost)" in rec.words()
        )
    again = RunDigest.from_bytes(digest.to_bytes())
    assert again is not None and [r.to_json() for r in again.recoveries] == [rec.to_json()]
    later = RunDigest("r2")
    later.ingest(
        [MetricEvent("resume", 0, 200.0, {"restart_count": 0, "step": 48}), *steps(0, 60, lambda s: 1.0, start=49)]
    )
    assert later.recoveries == [] and [r.attempt for r in digest.then(later).recoveries] == [1]


def test_an_elastic_run_that_went_on_with_fewer_ranks_and_grew_back_says_both_changes_of_size():
    """Attempt 2 has rank 0 alone (rank 1's node lost); attempt 3 has both again, rank 1 back on its
    node: each says its size, which rank left or joined and on which node, not that a rank moved."""
    from torchdeck.backends.recovery import Recovery, RecoveryLog

    def start(rank: int, at: float, attempt: int, nodes: list[str]) -> MetricEvent:
        return MetricEvent("start", rank, at, {"restart_count": attempt, "world_size": len(nodes), "nodes": nodes})

    events = [start(0, 0.0, 0, ["a", "b"]), start(1, 0.0, 0, ["a", "b"]), *steps(0, 25, lambda s: 1.0)]
    events += [*steps(1, 25, lambda s: 1.0), start(0, 60.0, 1, ["a"])]
    events += [MetricEvent("resume", 0, 61.0, {"restart_count": 1, "step": 20}), *steps(0, 45, lambda s: 1.0, start=21)]
    events += [start(1, 120.0, 2, ["a", "b"]), start(0, 121.0, 2, ["a", "b"])]
    events += [MetricEvent("resume", r, 122.0, {"restart_count": 2, "step": 40}) for r in (0, 1)]
    log = RecoveryLog()
    log.feed(events)
    shrunk, grown = log.recoveries()
    assert (shrunk.world, shrunk.most, shrunk.left, shrunk.joined, shrunk.moved) == (1, 2, {1: "b"}, {}, {})
    assert "the run went on with 1 rank of 2 (rank 1 left with node b); resumed from step 20" in shrunk.words()
    assert (grown.world, grown.joined, grown.left, grown.lost) == (2, {1: "b"}, {}, 5)
    assert "grew back to 2 ranks (rank 1 on node b); resumed from step 40 (the run got to 45" in grown.words()
    assert log.world == 2
    assert [Recovery.from_json(r.to_json()).words() for r in (shrunk, grown)] == [shrunk.words(), grown.words()]
    # an attempt of more ranks than any before grew, not grew back; a count change without nodes
    # said names the ranks past the smaller count
    log = RecoveryLog()
    log.feed(
        [
            MetricEvent("start", 0, 0.0, {"world_size": 2}),
            MetricEvent("start", 0, 9.0, {"restart_count": 1, "world_size": 4}),
        ]
    )
    (more,) = log.recoveries()
    assert more.joined == {2: "", 3: ""} and "grew to 4 ranks (ranks 2-3 joined)" in more.words()


def test_what_a_status_learnt_of_the_attempts_is_kept_whole_and_anything_else_kept_there_is_nothing():
    """The job's recovery annotation is the log's own JSON: fed on top of it, a status whose lines no
    longer hold the attempts' starts still says them; an annotation someone else wrote is no log."""
    from torchdeck.backends.recovery import RecoveryLog

    log = RecoveryLog()
    log.feed([MetricEvent("start", 0, 0.0, {"world_size": 2, "nodes": ["a", "b"]}), *steps(0, 30, lambda s: 1.0)])
    log.feed([MetricEvent("start", 0, 50.0, {"restart_count": 1, "world_size": 1, "nodes": ["a"]})])
    log.feed([MetricEvent("resume", 0, 51.0, {"restart_count": 1, "step": 40, "saved_step": 20})])
    said = log.lines()
    again = RecoveryLog.from_json(json.loads(json.dumps(log.to_json())))
    again.feed(steps(0, 90, lambda s: 1.0, start=60))  # the newest lines only
    assert again.lines() == said and again.world == 1 and again.to_json() == log.to_json()
    assert "(its snapshot of step 20; the run got to 30: 10 steps lost)" in said[0]
    junks: list[object] = [
        None,
        [],
        {"attempts": "x"},
        {"nodes": [1]},
        {"attempts": [{"attempt": "one"}]},
        {"worlds": {"a": 2}},
    ]
    for junk in junks:
        assert RecoveryLog.from_json(junk).to_json() == RecoveryLog().to_json()
