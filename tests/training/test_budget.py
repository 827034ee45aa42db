"""A budget on a real local run (torchrun, two ranks over gloo): past it the launcher stops the run,
the built-in trainer writes a snapshot at a step every rank agrees on, and the reason says so;
its cost shows in `status` and `jobs`; and `compare` puts it beside a failed run of a user's
script, while it runs and after (its digest made as it ended)."""

from __future__ import annotations

import json
import re
import sys

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
    """The test follows the run, never the clock: the run starts with a budget it cannot reach
    (days at its price), is compared live once at step 2, and is then given a budget it has already
    spent (``torchdeck budget``): its launcher stops it within a second, past step 2 on any host,
    however the host's load changed between two moments."""
    state = tmp_path / "state"
    script = tmp_path / "job" / "train.py"
    script.parent.mkdir()
    script.write_text(FAILING)
    failed = torchdeck(state, "train", str(script), "--python", sys.executable, "--nproc-per-node", "1")
    assert failed.returncode != 0
    other = json.loads(torchdeck(state, "jobs", "--output", "json").stdout)[0]["run_id"]

    backend = LocalBackend(state)
    paid = ["--set", "budget=$100000", "--set", "node_price_per_hour=3600"]  # $1 a second: 27 hours of budget
    started = torchdeck(state, "train", *quick_spec_args(cifar_dir, "--epochs", "30", *paid), "--detach")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    wait_status(backend, run_id, lambda s: s.state is JobState.RUNNING and s.step >= 2, timeout=300)
    live = json.loads(torchdeck(state, "compare", run_id, other, "--output", "json").stdout)
    assert [r["state"] for r in live["runs"]] == ["running", "failed"]
    assert live["runs"][0]["cost"]["running"] and live["runs"][0]["cost"]["budget"] == 100000

    lowered = torchdeck(state, "budget", run_id, "$0.01")  # spent already: it stops after the step it is in
    assert lowered.returncode == 0, lowered.stderr
    assert lowered.stdout.startswith(f"{run_id}: budget $0.01; $")
    ended = wait_status(backend, run_id, lambda s: s.state.is_terminal, timeout=300)
    assert ended.state is JobState.CANCELLED
    assert ended.reason.startswith("stopped at its budget: $") and ended.reason.endswith(" of $0.01 spent")
    assert f"torchdeck resume {run_id}" in ended.hint
    run_dir = state / "runs" / run_id
    stopped = [json.loads(line) for line in (run_dir / "metrics" / "rank-0.jsonl").read_text().splitlines()]
    last_step = max(r["step"] for r in stopped if r["event"] == "step")
    (stop,) = [r for r in stopped if r["event"] == "stopped"]
    assert stop["step"] == last_step and stop["signal"] == "SIGTERM"  # both ranks stopped after one step
    rank1 = [json.loads(line) for line in (run_dir / "metrics" / "rank-1.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rank1 if r["event"] == "stopped"] == [last_step]
    assert (run_dir / "checkpoints" / f"ckpt-{last_step:08d}.pt").is_file()
    assert ended.cost.amount >= 2 and ended.cost.lines[0].per_hour == 3600  # a second at least, at $1 a second
    assert ended.cost.budget == 0.01

    shown = torchdeck(state, "status", run_id)
    assert "of the $0.01 budget" in shown.stdout
    row = next(line for line in torchdeck(state, "jobs").stdout.splitlines() if line.startswith(run_id))
    share = re.search(r"\$[0-9.,]+ \(([0-9,]+)%\)", row)
    assert share and int(share[1].replace(",", "")) >= 100, row  # its share of the budget, past it

    assert (run_dir / "digest.json").is_file()  # made by the launcher as the run ended
    table = torchdeck(state, "compare", run_id, other)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert any(line.startswith("state") and "cancelled" in line and "failed" in line for line in lines)
    assert any(line.startswith("entrypoint.script") for line in lines) and "differs in the spec:" in lines
    final = json.loads(torchdeck(state, "compare", run_id, other, "--output", "json").stdout)
    assert final["runs"][1]["steps"] == 5 and final["runs"][1]["final_loss"] == 0.6
    assert final["runs"][1]["cost"]["amount"] is None and "local_price_per_hour" in final["runs"][1]["cost"]["unknown"]


def test_a_budget_is_changed_only_on_a_running_run_and_as_an_amount(tmp_path, cifar_dir):
    """``torchdeck budget`` refuses, in one line each, an amount that is none and a run that has
    ended; the run's own records are left as they were."""
    state = tmp_path / "state"
    done = torchdeck(state, "train", *quick_spec_args(cifar_dir, "--max-steps", "2", "--set", "node_price_per_hour=1"))
    assert done.returncode == 0, done.stderr
    run_id = json.loads(torchdeck(state, "jobs", "--output", "json").stdout)[0]["run_id"]
    bad = torchdeck(state, "budget", run_id, "lots")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "must be an amount in USD" in bad.stderr
    ended = torchdeck(state, "budget", run_id, "5")
    assert ended.returncode == 1 and f"{run_id} has succeeded: a budget is for a run that goes on" in ended.stderr
    assert not (state / "runs" / run_id / "budget.json").exists()
