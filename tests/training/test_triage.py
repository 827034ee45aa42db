"""Hang triage on this machine (issue 44): a real 4-rank torchrun over gloo, a user's script in
which rank 2 sleeps before its all-reduce at step 5; torchdeck names rank 2, its line, and the
collective the other three wait in, from each rank's own probe and PyTorch's Flight Recorder."""

from __future__ import annotations

import asyncio
import json
import sys

from hangs import ALL_REDUCE_LINE, SLEEP_LINE, hang_script
from local_runs import cli_env, finished, left_running, run_cli, wait_status
from tui_support import settings_for, wait_for

from torchdeck.backends.local import LocalBackend
from torchdeck.tui.app import make_app
from torchdeck.tui.screens.monitor import MonitorScreen

HANG = hang_script(rank=2, step=5)


def test_a_hung_four_rank_run_is_explained_naming_the_rank_its_line_and_the_collective(tmp_path):
    code, state = tmp_path / "project", tmp_path / "state"
    code.mkdir()
    (code / "hang.py").write_text(HANG)
    env = cli_env(state)
    args = ["train", "hang.py", "--nproc-per-node", "4", "--max-restarts", "0", "--python", sys.executable, "--detach"]
    started = run_cli(args, env, code)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip().splitlines()[-1]
    try:
        backend = LocalBackend(state)
        # every rank printed step 4; rank 2 then sleeps, the others wait in all-reduce #5
        wait_status(backend, run_id, lambda s: len(s.ranks) == 4 and all(r.step >= 4 for r in s.ranks), timeout=180)

        asked = run_cli(["triage", run_id, "--output", "json"], env, code)
        assert asked.returncode == 0, asked.stderr
        verdict = json.loads(asked.stdout)
        assert verdict["outliers"] == [2] and verdict["missing"] == []
        ranks = {r["rank"]: r for r in verdict["ranks"]}
        assert ranks[2]["where"] == f"hang.py:{SLEEP_LINE}" and ranks[2]["waiting_in"] == ""
        assert "time.sleep(3600)" in ranks[2]["code"]
        for rank in (0, 1, 3):
            assert ranks[rank]["where"] == f"hang.py:{ALL_REDUCE_LINE}" and ranks[rank]["waiting_in"] == "all_reduce"
            collective = ranks[rank]["collective"]
            assert collective["seq"] == 5 and not collective["completed"] and collective["op"] == "gloo:all_reduce"
            assert collective["sizes"] == [[1000]]
        assert ranks[2]["collective"]["seq"] == 4 and ranks[2]["collective"]["completed"]
        summary = verdict["summary"]
        assert summary.startswith(f"Rank 2 is not where the others are: it is at hang.py:{SLEEP_LINE}")
        assert "has not entered #5" in summary
        assert f"Ranks 0, 1, 3 are waiting in all_reduce at hang.py:{ALL_REDUCE_LINE}" in summary
        assert "#5 gloo:all_reduce (Float[1000])" in summary
        assert all(r["pid"] and r["node"] for r in verdict["ranks"])  # where each runs

        # the raw dumps stay in the run's folder; status shows the verdict, in text and in JSON
        run_dir = backend.resolve(run_id)
        assert sorted(p.name for p in (run_dir / "triage").glob("rank-*.json")) == [f"rank-{r}.json" for r in range(4)]
        status = json.loads(run_cli(["status", run_id, "--output", "json"], env, code).stdout)
        assert status["triage"]["summary"] == summary and status["state"] == "running"
        text = run_cli(["status", run_id], env, code).stdout
        assert "triage (" in text and "Rank 2 is not where the others are" in text

        # the console's monitor: the kept verdict at once, one of its own when the run has gone
        # quiet (no line for five steps' time, ranks idle), and another on the key
        asyncio.run(monitor_triages(state, run_id, verdict["time"]))
    finally:
        run_cli(["stop", run_id], env, code)
    assert left_running(run_id) == []

    # a run that has ended is not asked: one line that says so, and where its verdict is
    again = run_cli(["triage", run_id], env, code)
    assert again.returncode == 1 and "only a running run's ranks" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1


async def monitor_triages(state, run_id: str, asked_at: float) -> None:
    app = make_app(settings_for(state), LocalBackend(state), run_id)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
        screen = app.screen
        pane = screen.query_one("#triage")
        await wait_for(pilot, lambda: screen.triage is not None, what="the kept verdict")
        assert "Rank 2 is not where the others are" in str(pane.render())
        await wait_for(pilot, lambda: screen.triage.time > asked_at, timeout=60, what="a triage of its own")
        first = screen.triage.time
        assert screen.triage.outliers == [2] and "Rank 2" in str(pane.render())
        await pilot.press("t")
        await wait_for(pilot, lambda: screen.triage.time > first, timeout=30, what="the key's triage")
        assert screen.triage.outliers == [2]


PACES = """\
import os, time
rank = int(os.environ["RANK"])
for step in range(1, 21):
    time.sleep(0.05 if rank == 0 else 0.5)  # rank 1 takes ten times as long a step
    print(f"step {step}/20 loss {1.0 / step:.4f}", flush=True)
"""


def test_each_ranks_step_times_and_scores_are_in_the_status(tmp_path):
    """A real 2-rank torchrun of a script whose rank 1 steps ten times slower: status --output json
    gives each rank's median and p95 seconds per step and its scores. A sleep bounds a step from
    below only (a loaded host makes steps longer, and lines are timed when torchdeck reads them), so
    the figures are held to what the sleeps guarantee, and the ratio to half of what they set."""
    code, state = tmp_path / "project", tmp_path / "state"
    code.mkdir()
    (code / "paces.py").write_text(PACES)
    env = cli_env(state)
    done = run_cli(["train", "paces.py", "--max-restarts", "0", "--python", sys.executable], env, code)
    assert done.returncode == 0, done.stderr
    run_id = next(line.split()[0] for line in run_cli(["jobs"], env, code).stdout.splitlines()[1:])
    ranks = {
        r["rank"]: r for r in json.loads(run_cli(["status", run_id, "--output", "json"], env, code).stdout)["ranks"]
    }
    # a pace spans five steps, 2.5 s of rank 1's sleeps: a read of its first line up to 1.25 s late leaves
    # half of it (rank 0's lines come faster than torchdeck gathers them: a burst read together has no gaps)
    assert ranks[0]["step_s_median"] > 0 and ranks[1]["step_s_median"] >= 0.25
    assert ranks[0]["relative_score"] == 1.0 and 0 < ranks[1]["relative_score"] <= 0.5  # paced ten times apart
    assert ranks[1]["step_s_p95"] >= ranks[1]["step_s_median"] and 0 < ranks[1]["individual_score"] <= 1.0


def test_the_health_gates_bandwidth_sweep_between_local_ranks(tmp_path):
    """torchdeck check: a real torchrun of the sweep, gloo between two ranks here; each size's time
    is the slowest rank's, and its bus bandwidth nccl-tests' (equal to algbw for two ranks)."""
    env = cli_env(tmp_path / "state")
    done = run_cli(["check", "--max-bytes", "65536", "--output", "json"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["backend"] == "gloo" and result["world_size"] == 2 and len(result["hosts"]) == 2
    assert [r["bytes"] for r in result["rows"]] == [4096, 16384, 65536]
    for row in result["rows"]:
        assert row["time_s"] > 0 and row["busbw_gbps"] == row["algbw_gbps"] == row["bytes"] / row["time_s"] / 1e9
    (node,) = result["nodes"]  # this machine: its own links are the whole sweep's; no pair of nodes
    assert node["ranks"] == [0, 1] and node["intra"]["bytes"] == 65536 and result["pairs"] == []
    assert node["compute"]["gflops"] > 0 and node["compute"]["seconds"] >= 8 * 0.06  # its first rank's best round
    assert node["gpus"]["count"] == 0 and node["gpus"]["note"].startswith("NVML not loaded")
    assert node["dcgm"] == {"ran": False, "note": "dcgmi is not in the image"} and result["short"] == {}
    text = run_cli(["check", "--max-bytes", "16384"], env, tmp_path).stdout
    assert "all-reduce between 2 ranks (gloo" in text and "16 KiB" in text and "peak bus bandwidth" in text
    assert "every node passed (1 measured)" in text
    bad = run_cli(["check", "--nproc-per-node", "1"], env, tmp_path)
    assert bad.returncode == 1 and "a sweep needs 2 to 64 ranks" in bad.stderr


def test_a_local_train_with_the_health_gate_runs_it_as_the_plans_first_step(tmp_path, tiny_cifar):
    """Issue 53: the health gate is a step of the plan on every backend: the dry run shows it, and
    the run made from the plan runs it first (the sweep between its ranks here, said on stderr),
    exactly as the console's launch does, with nothing set on the backend from outside."""
    env = cli_env(tmp_path / "state")
    args = ["train", "--check", "--data-dir", str(tiny_cifar), "--nproc-per-node", "2", "--max-steps", "2",
            "--batch-size", "16"]  # fmt: skip
    dry = run_cli([*args, "--dry-run"], env, tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "# health gate first: torchdeck check measures the all-reduce between the run's ranks here" in dry.stdout
    done = run_cli([*args, "--detach"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "running python -m torch.distributed.run" in done.stderr
    assert "health gate: peak bus bandwidth" in done.stderr and "this machine passed" in done.stderr
    final = finished(LocalBackend(tmp_path / "state"), done.stdout.strip())
    assert final.state.value == "succeeded", (final.reason, final.hint)
