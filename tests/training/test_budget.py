"""A budget on a real local run (torchrun, two ranks over gloo): past it the launcher stops the run,
the built-in trainer writes a snapshot at a step every rank agrees on, and the reason says so;
its cost shows in `status` and `jobs`; and `compare` puts it beside a failed run of a user's
script, while it runs and after (its digest made as it ended)."""

from __future__ import annotations

import json
import sys
import time as clock

import pytest
from local_runs import quick_spec_args, torchdeck, wait_status

from torchdeck.backends.base import JobState
from torchdeck.backends.local import LocalBackend

FAILING = """\
import sys
for step in range(1, 6):
    print(f"step {step} loss {3.0 / step:.3f}", flush=True)
sys.exit("diverged")
"""


def test_a_budget_stops_the_run_with_a_snapshot_and_compare_shows_it_beside_another(tmp_path, cifar_dir):
    """No wall-clock race: a budget is time at a price, so the test prices the run by this host's own
    speed, measured in the same test. A first run (a budget it cannot reach) is compared live once at
    step 2, which also says how long this host takes to get there; the budget run then gets three
    times that (10 s at least) before its budget is spent, so it is stopped after a step on any host
    (a loaded one stopped it at step 1 first, correctly, where the test waited for step 2)."""
    state = tmp_path / "state"
    script = tmp_path / "job" / "train.py"
    script.parent.mkdir()
    script.write_text(FAILING)
    failed = torchdeck(state, "train", str(script), "--python", sys.executable, "--nproc-per-node", "1")
    assert failed.returncode != 0
    other = json.loads(torchdeck(state, "jobs", "--output", "json").stdout)[0]["run_id"]

    backend = LocalBackend(state)
    unreached = ["--set", "budget=$100", "--set", "node_price_per_hour=3.60"]
    first = torchdeck(state, "train", *quick_spec_args(cifar_dir, "--epochs", "30", *unreached), "--detach")
    assert first.returncode == 0, first.stderr
    live_id = first.stdout.strip()
    at_step_2 = wait_status(backend, live_id, lambda s: s.state is JobState.RUNNING and s.step >= 2, timeout=120)
    took = clock.time() - at_step_2.submitted_at
    live = json.loads(torchdeck(state, "compare", live_id, other, "--output", "json").stdout)
    assert [r["state"] for r in live["runs"]] == ["running", "failed"]
    assert live["runs"][0]["cost"]["running"] and live["runs"][0]["cost"]["budget"] == 100
    assert torchdeck(state, "stop", live_id).returncode == 0

    # $0.01 at a price that spends it in three times what this host took to reach step 2
    seconds = max(10.0, 3 * took)
    paid = ["--set", "budget=$0.01", "--set", f"node_price_per_hour={0.01 * 3600 / seconds:.6f}"]
    started = torchdeck(state, "train", *quick_spec_args(cifar_dir, "--epochs", "30", *paid), "--detach")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    ended = wait_status(backend, run_id, lambda s: s.state.is_terminal, timeout=seconds + 120)
    assert ended.state is JobState.CANCELLED
    assert ended.reason.startswith("stopped at its budget: $0.01") and f"torchdeck resume {run_id}" in ended.hint
    run_dir = state / "runs" / run_id
    stopped = [json.loads(line) for line in (run_dir / "metrics" / "rank-0.jsonl").read_text().splitlines()]
    last_step = max(r["step"] for r in stopped if r["event"] == "step")
    (stop,) = [r for r in stopped if r["event"] == "stopped"]
    assert stop["step"] == last_step and stop["signal"] == "SIGTERM"  # both ranks stopped after one step
    rank1 = [json.loads(line) for line in (run_dir / "metrics" / "rank-1.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rank1 if r["event"] == "stopped"] == [last_step]
    assert (run_dir / "checkpoints" / f"ckpt-{last_step:08d}.pt").is_file()
    assert ended.cost.amount >= 0.01 and ended.cost.lines[0].per_hour == pytest.approx(0.01 * 3600 / seconds, rel=1e-3)

    shown = torchdeck(state, "status", run_id)
    assert "cost: $0.01" in shown.stdout and "of the $0.01 budget" in shown.stdout
    assert run_id in torchdeck(state, "jobs").stdout and "(1" in torchdeck(state, "jobs").stdout  # its share, >= 100%

    assert (run_dir / "digest.json").is_file()  # made by the launcher as the run ended
    table = torchdeck(state, "compare", run_id, other)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert any(line.startswith("state") and "cancelled" in line and "failed" in line for line in lines)
    assert any(line.startswith("entrypoint.script") for line in lines) and "differs in the spec:" in lines
    final = json.loads(torchdeck(state, "compare", run_id, other, "--output", "json").stdout)
    assert final["runs"][1]["steps"] == 5 and final["runs"][1]["final_loss"] == 0.6
    assert final["runs"][1]["cost"]["amount"] is None and "local_price_per_hour" in final["runs"][1]["cost"]["unknown"]
