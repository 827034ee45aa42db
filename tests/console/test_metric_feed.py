"""The monitor's metric reader: a child process that follows a run's metric
stream and sends snapshots. It must carry the whole stream, say a failure in
words, and never outlive the console that started it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from local_runs import end_launcher, live_launcher
from tui_support import RECORDED, RECORDED_RUN, FixedNodesBackend, recorded_state

from torchdeck.backends.errors import BackendError
from torchdeck.backends.local import LocalBackend
from torchdeck.monitor.feed import MetricFeed

RECORDED_LINES = sum(len(p.read_bytes().splitlines()) for p in (RECORDED / RECORDED_RUN / "metrics").glob("*.jsonl"))


def last_snapshot(feed: MetricFeed, timeout: float = 30.0):
    newest, deadline = None, time.monotonic() + timeout
    for snap in feed.snapshots(wait_s=0.1):
        if snap is not None:
            newest = snap
        assert time.monotonic() < deadline, "the feed did not end"
    return newest


def test_feed_carries_the_whole_recorded_stream(tmp_path):
    state = recorded_state(tmp_path)
    with MetricFeed(FixedNodesBackend(state), RECORDED_RUN) as feed:
        snap = last_snapshot(feed)
    assert snap.events == RECORDED_LINES
    assert [row.rank for row in snap.ranks] == [0, 1] and all(row.flag == "done" for row in snap.ranks)
    assert snap.restarts == 1 and snap.done is not None and len(snap.evals) == 4
    assert set(snap.curves) == {0, 1} and all(len(xs) > 10 for xs, _ in snap.curves.values())


def test_feed_failure_arrives_as_one_line(tmp_path):
    with MetricFeed(LocalBackend(tmp_path), "no-such-run") as feed, pytest.raises(BackendError) as err:
        last_snapshot(feed)
    assert "no-such-run" in err.value.message and "\n" not in str(err.value)


def reader_processes(parent_pid: int | None = None) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "ppid"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "torchdeck.monitor.feed" in cmd and (parent_pid is None or proc.info["ppid"] == parent_pid):
            found.append(proc)
    return found


@pytest.mark.slow
def test_reader_ends_with_the_feed_and_with_a_killed_console(tmp_path):
    run_id, launcher = "live-1", live_launcher(tmp_path, "live-1")
    try:
        # closed by its owner: the child goes at once
        feed = MetricFeed(LocalBackend(tmp_path), run_id)
        assert next(s for s in feed.snapshots(wait_s=0.1) if s is not None).events == 0
        assert reader_processes(psutil.Process().pid)
        feed.close()
        assert not reader_processes(psutil.Process().pid)
        # a console killed outright: the child notices at its next send (a second at most)
        console = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(f"""
            import sys, time
            sys.path[:0] = {sys.path!r}
            from torchdeck.backends.local import LocalBackend
            from torchdeck.monitor.feed import MetricFeed
            feed = MetricFeed(LocalBackend({str(tmp_path)!r}), {run_id!r})
            next(s for s in feed.snapshots() if s is not None)
            print("reading", flush=True)
            time.sleep(120)
        """),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert console.stdout.readline().strip() == "reading"
        readers = reader_processes(console.pid)
        assert len(readers) == 1
        console.send_signal(signal.SIGKILL)
        console.wait()
        gone, alive = psutil.wait_procs(readers, timeout=5)
        assert not alive, "the metric reader outlived the console"
    finally:
        end_launcher(launcher)


def test_the_console_picks_which_ranks_the_reader_sends_curves_for(tmp_path):
    """Issue 17: with more ranks than the chart can tell apart, the user names the ranks; the
    reader (a child) sends their curves from the next snapshot on, and the automatic choice again
    when the pick is emptied."""
    run_id, launcher = "live-1", live_launcher(tmp_path, "live-1")
    try:
        for rank in range(12):
            lines = [
                {"schema": 1, "event": "step", "rank": rank, "world_size": 12, "step": s, "loss": 1.0 / s, "time": s}
                for s in range(1, 6)
            ]
            path = tmp_path / "runs" / run_id / "metrics" / f"rank-{rank}.jsonl"
            path.write_text("".join(json.dumps(x) + "\n" for x in lines))

        def curves_become(feed, want: set[int]) -> None:
            deadline = time.monotonic() + 20
            for snap in feed.snapshots(wait_s=0.1):
                if snap is not None and set(snap.curves) == want:
                    return
                assert time.monotonic() < deadline, f"the curves never became {want}"

        with MetricFeed(LocalBackend(tmp_path), run_id) as feed:
            curves_become(feed, set(range(8)))  # the lowest 8: nothing is flagged
            feed.pick([11, 3])
            curves_become(feed, {3, 11})
            feed.pick([])
            curves_become(feed, set(range(8)))
    finally:
        end_launcher(launcher)


@pytest.mark.parametrize(
    ("text", "ranks"),
    [("", []), ("0,8,16-18", [0, 8, 16, 17, 18]), (" 3 , 1,3", [3, 1]), ("4-4", [4])],
)
def test_ranks_as_a_person_types_them(text, ranks):
    from torchdeck.monitor.state import parse_ranks

    assert parse_ranks(text) == ranks


@pytest.mark.parametrize(
    ("text", "words"),
    [("x", "'x' is not a rank"), ("5-2", "runs backwards"), ("0-100", "at most 8"), ("1-", "not a rank")],
)
def test_ranks_that_do_not_parse_say_why(text, words):
    from torchdeck.monitor.state import parse_ranks

    with pytest.raises(ValueError, match=words):
        parse_ranks(text)
