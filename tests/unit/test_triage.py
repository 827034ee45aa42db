"""The triage verdict from the ranks' dumps (``backends/triage.py``), and the probe's dump of a
live process (``trainer/triage_probe.py``); the 4-rank gloo run is in tests/training/test_triage.py."""

from __future__ import annotations

import os
import threading
import time

from torchdeck.backends import triage
from torchdeck.trainer import triage_probe


def dump(rank: int, line: int, collective: str | None, seq: int, retired: bool, host: str = "node-a") -> dict:
    frames = [{"file": "/home/u/proj/train.py", "line": line, "function": "main", "code": "x"}]
    if collective:
        frames += [
            {
                "file": "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py",
                "line": 81,
                "function": "wrapper",
            },
            {
                "file": "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
                "line": 2,
                "function": collective,
            },
        ]
    entry = {
        "collective_seq_id": seq,
        "profiling_name": "nccl:all_reduce",
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "retired": retired,
        "pg": "default_pg",
    }
    return {
        "rank": rank,
        "pid": 100 + rank,
        "host": host,
        "threads": [{"name": "MainThread", "main": True, "frames": frames}],
        "flight_recorder": [entry],
    }


def test_every_rank_in_the_same_collective_says_the_cause_is_below_the_script():
    found = [triage.rank_where(dump(r, 20, "all_reduce", 7, False)) for r in range(3)]
    verdict = triage.explain("run", found, 4)
    assert verdict.outliers == [] and verdict.missing == [3]
    assert "Ranks 0, 1, 2 are waiting in all_reduce at train.py:20" in verdict.summary
    assert "every rank that answered is there" in verdict.summary and "Rank 3 did not answer" in verdict.summary


def test_a_rank_at_the_same_line_but_a_collective_behind_is_the_odd_one_out():
    found = [triage.rank_where(dump(r, 20, "all_reduce", 7 if r != 1 else 6, False, f"node-{r}")) for r in range(4)]
    verdict = triage.explain("run", found, 4)
    assert verdict.outliers == [1]
    assert "Rank 1 is not where the others are" in verdict.summary and "on node-1" in verdict.summary
    assert "it has not entered #7" in verdict.summary


def test_no_rank_answering_says_so_and_a_verdict_reads_back():
    verdict = triage.explain("run", [], 2)
    assert "No rank answered" in verdict.summary and verdict.missing == [0, 1]
    found = [triage.rank_where(dump(r, 20, "all_reduce", 7, False)) for r in range(2)]
    again = triage.Triage.from_dict(triage.explain("run", found, 2).to_dict())
    assert again.ranks[0].collective == found[0].collective


def test_a_dump_that_is_a_link_or_not_json_is_no_answer(tmp_path):
    folder = tmp_path / "triage"
    folder.mkdir()
    (folder / "rank-0.json").symlink_to("/dev/zero")
    (folder / "rank-1.json").write_text("{not json")
    started = time.process_time()  # CPU time: reading /dev/zero would spend it; a loaded host does not
    dumps, _ = triage.ask(folder, 2, wait_s=0.5)
    assert dumps == {} and time.process_time() - started < 2
    (folder / "triage.json").symlink_to("/etc/passwd")
    assert triage.load(folder) is None


def test_the_probe_answers_a_request_with_every_threads_stack_and_why_no_flight_recorder(tmp_path, monkeypatch):
    folder = tmp_path / "triage"
    environ = {"RANK": "0", triage_probe.TRIAGE_DIR_ENV: str(folder)}
    waiting = threading.Event()
    helper = threading.Thread(target=waiting.wait, name="data-loader", daemon=True)
    helper.start()
    probe = triage_probe.start(environ)
    assert probe is not None and triage_probe.TRIAGE_DIR_ENV not in environ  # a child is not the rank
    assert triage_probe.start({"RANK": "3"}) is None and triage_probe.start({triage_probe.TRIAGE_DIR_ENV: "x"}) is None
    try:
        dumps, token = triage.ask(folder, 1, wait_s=30)  # answered within a second; a loaded host may take longer
    finally:
        waiting.set()
    (answer,) = dumps.values()
    assert answer["rank"] == 0 and answer["token"] == token and answer["pid"] == os.getpid()
    names = [t["name"] for t in answer["threads"]]
    assert "data-loader" in names and "torchdeck-triage" not in names and answer["threads"][0]["main"]
    assert answer["flight_recorder"] is None and answer["flight_recorder_note"]
