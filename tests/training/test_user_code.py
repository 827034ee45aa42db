"""The user's own code on the local backend, as a user runs it: ``torchdeck
train train.py -- ARGS`` from the folder the script is in, with a plain DDP
script written here that prints its loss as text, in a virtual environment
that torchdeck's own environment lacks a package of. Real torchrun over gloo."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from local_runs import cli_env, monitor_snapshot, run_cli

from torchdeck.backends.local import LocalBackend
from torchdeck.monitor.state import MonitorState

TRAIN = """
import sys, time
import torch
import torch.distributed as dist
import onlyhere  # in the user's virtual environment, not in torchdeck's

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
steps = int(sys.argv[sys.argv.index("--steps") + 1])
print(f"starting on rank {rank} with {onlyhere.GREETING}", flush=True)
for step in range(1, steps + 1):
    x = torch.randn(16, 8)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    print(f"Epoch 1 | iter {step}/{steps} | loss {loss.item():.4f} | 250.0 samples/s", flush=True)
    time.sleep(0.02)
print("val accuracy: 87.5%", flush=True)
dist.destroy_process_group()
"""


def make_venv(root: Path, with_torch: bool) -> Path:
    """A virtual environment of the user's: a package torchdeck's environment lacks (onlyhere), and
    torch where ``with_torch`` (this environment's, through a .pth file: no download)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    (site,) = root.glob("lib/python3*/site-packages")
    (site / "onlyhere.py").write_text('GREETING = "hello from the venv"\n')
    if with_torch:
        (site / "torch_from_outside.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


@pytest.fixture(scope="module")
def user_run(tmp_path_factory):
    """One job serves every assertion below: 2 ranks of the script above, 12 steps."""
    tmp = tmp_path_factory.mktemp("user")
    code, state = tmp / "project", tmp / "state"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    env = {**cli_env(state), "VIRTUAL_ENV": str(make_venv(tmp / "venv", with_torch=True))}
    done = run_cli(["train", "train.py", "--nproc-per-node", "2", "--", "--steps", "12"], env, code, timeout=180)
    return done, LocalBackend(state), code


def test_a_text_printing_ddp_script_runs_in_the_users_venv_with_live_metrics(user_run):
    done, backend, _ = user_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert ": succeeded, accuracy 87.50%" in done.stdout
    (status,) = backend.list()
    from torchdeck.cli.jobs import progress_lines

    ranks = progress_lines(monitor_snapshot(backend, status.run_id))[1:]  # `train`'s lines on a terminal
    assert ranks and all(line.endswith("250 smp/s") for line in ranks), ranks  # samples, not images
    assert status.run_id.startswith("train-") and status.state.value == "succeeded"  # named after the script
    assert (status.step, status.world_size) == (12, 2)
    # each rank's progress, in status --output json and jobs --output json alike
    env = cli_env(backend.state_dir)
    shown = json.loads(run_cli(["status", status.run_id, "--output", "json"], env, Path.cwd()).stdout)
    listed = json.loads(run_cli(["jobs", "--output", "json"], env, Path.cwd()).stdout)
    for ranks in (shown["ranks"], listed[0]["ranks"]):
        assert [r["rank"] for r in ranks] == [0, 1]
        assert all(r["step"] == 12 and r["samples_per_s"] == 250.0 and r["state"] == "done" for r in ranks)
        assert all(r["loss"] is not None and r["last_report"] > status.submitted_at for r in ranks)

    snap = monitor_snapshot(backend, status.run_id)
    assert sorted(r.rank for r in snap.ranks) == [0, 1] and all(r.step == 12 for r in snap.ranks)
    assert all(r.flag == "done" and r.samples_per_s == pytest.approx(250.0) for r in snap.ranks)
    assert {rank: len(steps) for rank, (steps, _) in snap.curves.items()} == {0: 12, 1: 12}  # both ranks' curves
    assert snap.total_steps == 12 and snap.evals == [(1, 0.875)]


BAR_SCRIPT = """
import sys, time
import torch
import torch.distributed as dist
from tqdm import tqdm

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(2):
    bar = tqdm(range(12), desc=f"Epoch {epoch}")  # rewrites one line with \\r, ends it at the epoch's end
    for _ in bar:
        x = torch.randn(16, 8)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        bar.set_postfix(v_num=0, train_loss=f"{loss.item():.3f}")
        time.sleep(0.12)
dist.destroy_process_group()
"""


def test_a_tqdm_bar_is_read_as_it_updates_per_rank_with_its_epoch(tmp_path):
    """Issue 31: the real tqdm (its bar on stderr, rewritten with \\r, no newline until the epoch
    ends) on 2 ranks: each rank's curve has points within each epoch, not one per epoch, and the
    step is the global one (epoch 1's 12th batch is step 24)."""
    code, state = tmp_path / "project", tmp_path / "state"
    code.mkdir()
    (code / "train.py").write_text(BAR_SCRIPT)
    env = {**cli_env(state), "VIRTUAL_ENV": str(make_venv(tmp_path / "venv", with_torch=True))}
    done = run_cli(["train", "train.py", "--nproc-per-node", "2"], env, code, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    backend = LocalBackend(state)
    (status,) = backend.list()
    assert (status.step, status.epoch) == (24, 1) and status.loss is not None

    snap = monitor_snapshot(backend, status.run_id)
    assert sorted(r.rank for r in snap.ranks) == [0, 1] and all(r.step == 24 for r in snap.ranks)
    for rank, (steps, losses) in snap.curves.items():
        assert list(steps) == sorted(steps) and steps[-1] == 24, rank
        assert len([s for s in steps if s <= 12]) >= 3, (rank, steps)  # read within the epoch, not at its end
        assert len(losses) == len(steps)


def test_the_ranks_output_is_their_log_and_runs_in_the_code_folder(user_run):
    done, backend, code = user_run
    (status,) = backend.list()
    lines = [line.text for batch in backend.logs(status.run_id) for line in batch]
    assert lines.count("starting on rank 0 with hello from the venv") == 1
    assert sum("| loss " in line for line in lines) == 24
    launch = yaml.safe_load((backend.resolve(status.run_id) / "launch.json").read_text())
    assert launch["cwd"] == str(code) and "torchdeck.backends.rank_output" in launch["cmd"]


def test_built_in_only_commands_say_so_for_user_code(user_run, tmp_path):
    _, backend, code = user_run
    (status,) = backend.list()
    env = cli_env(backend.state_dir)
    for argv, words in (
        (
            ["test", "--run", status.run_id],
            "the model test is for the built-in CIFAR-10 trainer; this spec runs train.py",
        ),
        (["data", "prepare", "train.py"], "data prepare is for the built-in CIFAR-10 trainer"),
    ):
        done = run_cli(argv, env, code)
        assert done.returncode == 2 and words in done.stderr, done.stderr
    # the same script renders for a cluster: its folder travels in a ConfigMap (tests/kube/test_user_code_cluster.py)
    done = run_cli(["render", "train.py", "--image", "repo/x:1", "--", "--lr", "0.1"], env, code)
    assert done.returncode == 0, done.stderr
    objects = list(yaml.safe_load_all(done.stdout))
    assert [o["kind"] for o in objects] == ["ConfigMap", "PyTorchJob"]
    master = objects[1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert master["args"][-3:] == ["/workspace/code/train.py", "--lr", "0.1"]


def test_a_failing_script_says_why_in_one_line_with_a_hint(tmp_path):
    code, state = tmp_path / "project", tmp_path / "state"
    code.mkdir()
    # imported by name at run time: the check before the start (see needs.py below) cannot see it
    (code / "train.py").write_text(
        "import importlib, torch\nprint('loss 1.0')\nimportlib.import_module('notinstalled')\n"
    )
    env = cli_env(state)
    done = run_cli(["train", "train.py", "--max-restarts", "0", "--python", sys.executable], env, code)
    assert done.returncode == 1
    error = done.stderr.strip().splitlines()[-1]
    assert "ModuleNotFoundError: No module named 'notinstalled'" in error
    assert "requirements.txt" in error


GPU_SCRIPT = """
import os
import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
print(f"attempt {os.environ['TORCHELASTIC_RESTART_COUNT']} on rank {rank}", flush=True)
torch.cuda.set_device(rank)
dist.init_process_group("nccl")
"""


def test_a_script_that_needs_a_gpu_fails_at_once_saying_so_and_is_not_restarted(tmp_path):
    """Issue 31: the error is the same on every attempt (a CPU build of torch has no CUDA; a CUDA build
    finds no driver on a machine without a GPU), so the
    group is not restarted three times: one attempt, and the reason names the need, the line that
    asked and why it was not restarted; the whole reason reaches `status`."""
    code, state = tmp_path / "project", tmp_path / "state"
    code.mkdir()
    (code / "train.py").write_text(GPU_SCRIPT)
    env = cli_env(state)
    args = ["train", "train.py", "--nproc-per-node", "2", "--max-restarts", "3", "--python", sys.executable]
    done = run_cli(args, env, code, timeout=180)
    assert done.returncode == 1, done.stdout + done.stderr
    (status,) = LocalBackend(state).list()
    assert status.state.value == "failed" and status.restarts == 0
    import torch

    # a CPU build of torch says it has no CUDA; PyPI's CUDA build, on a machine without a GPU, no driver
    why = "torch here is a CPU build" if torch.version.cuda is None else "this machine has no GPU"
    assert f"the script needs a GPU ({why})" in status.reason
    assert "(at train.py:8: torch.cuda.set_device(rank))" in status.reason
    assert "not restarted: it failed before its first step on attempt 1" in status.reason
    assert "torch.cuda.is_available()" in status.hint
    logs = [line.text for batch in LocalBackend(state).logs(status.run_id) for line in batch]
    assert not any("attempt 1 on rank" in line for line in logs)  # never a second attempt
    shown = run_cli(["status", status.run_id], env, code)
    assert "not restarted" in shown.stdout + shown.stderr and "train.py:8" in shown.stdout + shown.stderr


def test_a_rank_that_aborts_as_it_exits_is_named_with_its_signal_and_last_line(tmp_path):
    """PyTorch's gloo threads can abort a DDP script's exit after its work is done (seen in this
    suite, 1 run in 16 on a loaded host): the reason is that rank, SIGABRT and the C++ runtime's
    last words, not the URL of torchrun's error summary. Only rank 0 aborts: with two, torchrun
    names whichever ended first (CI saw rank 1)."""
    code, state = tmp_path / "project", tmp_path / "state"
    code.mkdir()
    (code / "train.py").write_text(
        "import os, sys\nprint('loss 1.0', flush=True)\n"
        "if os.environ['RANK'] == '0':\n"
        "    print('terminate called without an active exception', file=sys.stderr, flush=True)\n"
        "    os.abort()\n"
    )
    done = run_cli(["train", "train.py", "--max-restarts", "0", "--python", sys.executable], cli_env(state), code)
    assert done.returncode == 1
    error = done.stderr.strip().splitlines()[-1]
    assert "rank 0 ended with SIGABRT (exit code 134): terminate called without an active exception" in error
    assert "finish()" in error and "To enable traceback" not in error


def test_a_rank_that_aborts_as_it_exits_after_its_last_step_is_done_and_not_restarted(tmp_path):
    """The same abort after the script's own last step (``step 2/2``): the work is done, so the rank
    is done, the run succeeds, and torchrun does not start it all again (whose second attempt this
    torch has been seen to hang in)."""
    code, state = tmp_path / "project", tmp_path / "state"
    code.mkdir()
    (code / "train.py").write_text(
        "import os, sys\nprint('step 1/2 loss 1.0', flush=True)\nprint('step 2/2 loss 0.5', flush=True)\n"
        "if os.environ['RANK'] == '0':\n"
        "    print('terminate called without an active exception', file=sys.stderr, flush=True)\n"
        "    os.abort()\n"
    )
    args = ["train", "train.py", "--nproc-per-node", "2", "--max-restarts", "2", "--python", sys.executable]
    done = run_cli(args, cli_env(state), code)
    assert done.returncode == 0, done.stdout + done.stderr
    (status,) = LocalBackend(state).list()
    assert status.state.value == "succeeded" and status.restarts == 0 and status.step == 2
    logs = [line.text for batch in LocalBackend(state).logs(status.run_id) for line in batch]
    assert any("aborted as it exited, after its work was done" in line for line in logs)


TEARDOWN_ABORT_OF_RANK_1 = """
import os, sys
print("step 1/2 loss 1.0", flush=True) if os.environ["RANK"] == "0" else None  # rank 1 says nothing
print("step 2/2 loss 0.5", flush=True) if os.environ["RANK"] == "0" else None


class GlooThreads:  # as PyTorch's gloo threads do, now and then: abort once the interpreter tears down
    def __del__(self, os=os, sys=sys):
        print("terminate called without an active exception", file=sys.stderr, flush=True)
        os.abort()


if os.environ["RANK"] == "1":
    threads = GlooThreads()
    if sys.argv[1:] == ["raise"]:
        raise ValueError("the script's own error")
    if sys.argv[1:] == ["exit"]:
        sys.exit(3)  # a failure of its own, said with sys.exit
"""


def test_a_silent_rank_that_aborts_in_teardown_after_reaching_its_exit_is_done(tmp_path):
    """The CI failure of e465d9a: Lightning's rank 1 prints no step, and gloo aborted its teardown
    after ``fit`` returned; torchrun ran the whole training again, and its next attempts failed or
    hung. The rank's python tells its wrapper that it reached the interpreter's exit (the pipe of
    ``trainer/exitmark/sitecustomize.py``), so such a rank is done and nothing is restarted; one that
    raised first, or left through ``sys.exit(3)``, is still failed."""
    code, state = tmp_path / "project", tmp_path / "state"
    code.mkdir()
    (code / "train.py").write_text(TEARDOWN_ABORT_OF_RANK_1)
    env = cli_env(state)
    args = ["train", "train.py", "--nproc-per-node", "2", "--max-restarts", "2", "--python", sys.executable]
    done = run_cli(args, env, code)
    assert done.returncode == 0, done.stdout + done.stderr
    (status,) = LocalBackend(state).list()
    assert status.state.value == "succeeded" and status.restarts == 0 and status.step == 2
    assert [(r.rank, r.state) for r in status.ranks] == [(0, "done"), (1, "done")]
    logs = [line.text for batch in LocalBackend(state).logs(status.run_id) for line in batch]
    assert any("aborted as it exited" in line for line in logs) and any("terminate called" in line for line in logs)

    args = ["train", "train.py", "--nproc-per-node", "2", "--max-restarts", "0", "--python", sys.executable]
    failed = run_cli([*args, "--", "raise"], env, code)
    assert failed.returncode == 1
    assert "ValueError: the script's own error" in failed.stderr.strip().splitlines()[-1]
    failed = run_cli([*args, "--", "exit"], env, code)
    assert failed.returncode == 1
    assert "rank 1 ended with SIGABRT" in failed.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["train", "missing.py"], "entrypoint.script: no script missing.py in"),
        (["train", "--module", "not_a_module"], "entrypoint.module: not_a_module does not import"),
        (["train", "train.py", "--set", "metrics.pattern=(?P<lr>x)"], "metrics.pattern: has groups"),
        (["train", "train.py", "--python", "NOVENV"], "torch does not import in"),
        (["train", "needs.py"], "entrypoint.script: needs.py imports not_installed_here, which"),
    ],
)
def test_bad_user_code_input_is_one_line_and_starts_nothing(tmp_path, argv, words):
    code, state = tmp_path / "project", tmp_path / "state"
    code.mkdir()
    (code / "train.py").write_text("print('loss 1.0')\n")
    (code / "needs.py").write_text("import os\nimport torch\nimport not_installed_here\n")
    no_torch = make_venv(tmp_path / "venv", with_torch=False) / "bin" / "python"
    argv = [str(no_torch) if a == "NOVENV" else a for a in argv]
    if "--python" not in argv:
        argv += ["--python", sys.executable]
    done = run_cli(argv, cli_env(state), code)
    assert done.returncode in (1, 2) and words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (state / "runs").exists() or not any((state / "runs").iterdir())


def test_a_script_inside_a_project_runs_from_its_folder_with_the_projects_packages(tmp_path):
    """Issue 31: run from projects/demo of a project whose package is not installed, the script
    imports it (the project root is on its path, as in the pods) and runs in its own folder."""
    repo = tmp_path / "repo"
    (repo / "helpers").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (repo / "helpers" / "__init__.py").write_text("LOSS = 0.5\n")
    project = repo / "projects" / "demo"
    project.mkdir(parents=True)
    (project / "input.txt").write_text("read from the script's own folder\n")
    (project / "train.py").write_text(
        "import helpers\nprint(open('input.txt').read().strip(), flush=True)\nprint(f'loss {helpers.LOSS}')\n"
    )
    state = tmp_path / "state"
    done = run_cli(["train", "train.py", "--nproc-per-node", "1", "--python", sys.executable], cli_env(state), project)
    assert done.returncode == 0, done.stdout + done.stderr
    (status,) = LocalBackend(state).list()
    assert status.loss == 0.5
    launch = yaml.safe_load((LocalBackend(state).resolve(status.run_id) / "launch.json").read_text())
    assert launch["cwd"] == str(project) and launch["env"]["PYTHONPATH"] == str(repo)
    spec = yaml.safe_load((LocalBackend(state).resolve(status.run_id) / "spec.yaml").read_text())
    assert spec["entrypoint"]["script"] == "projects/demo/train.py" and spec["entrypoint"]["workdir"] == "projects/demo"


def test_init_writes_a_spec_for_a_script_that_train_then_runs(tmp_path):
    code = tmp_path / "project"
    (code / "src").mkdir(parents=True)
    (code / "src" / "train.py").write_text("print('loss 1.0')\n")
    env = cli_env(tmp_path / "state")
    done = run_cli(["init", "--script", "src/train.py", "--", "--lr", "0.1"], env, code)
    assert done.returncode == 0, done.stderr
    written = yaml.safe_load((code / "torchdeck.yaml").read_text())["entrypoint"]
    assert (written["script"], written["code"], written["args"]) == ("src/train.py", ".", ["--lr", "0.1"])
    done = run_cli(["train", "--dry-run", "--python", sys.executable], env, code)
    assert done.returncode == 0, done.stderr
    assert "-m torchdeck.backends.rank_output" in done.stdout and "-u src/train.py --lr 0.1" in done.stdout


REPO = Path(__file__).resolve().parent.parent.parent


@pytest.mark.parametrize("script", ["train_report.py", "train_text.py"])
def test_the_examples_run_unmodified_in_a_venv_without_torchdeck(tmp_path, script):
    """examples/ddp as the README and docs/YOUR-CODE.md run them: the helper one imports ``torchdeck.report`` from an
    environment that has torch and no torchdeck (torchdeck puts the helper alone on its path)."""
    venv = make_venv(tmp_path / "venv", with_torch=True)
    env = {**cli_env(tmp_path / "state"), "VIRTUAL_ENV": str(venv)}
    argv = ["train", str(REPO / "examples" / "ddp" / script), "--nproc-per-node", "2", "--max-restarts", "0"]
    argv += ["--", "--epochs", "1"]  # no restart: a failed rank fails the run with its reason, at once
    done = run_cli(argv, env, tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr + done.stdout
    (status,) = LocalBackend(tmp_path / "state").list()
    assert status.state.value == "succeeded" and status.world_size == 2
    assert (status.step, status.total_steps, status.epoch, status.epochs) == (64, 64, 1, 1)  # jobs shows 64/64, 1/1
    state = MonitorState()
    events = asyncio.run(_all_events(LocalBackend(tmp_path / "state"), status.run_id))
    state.ingest(events)
    steps = [e for e in events if e.event == "step"]
    assert {e.rank for e in steps} == {0, 1} and len(steps) == 2 * 64
    assert {e.record.get("total_steps") for e in events if e.event in ("start", "step")} - {None} == {64}
    assert steps[-1].record["loss"] < steps[0].record["loss"]
    assert [e.record["accuracy"] for e in events if e.event == "eval"][0] > 0.5
    assert sorted(state.ranks) == [0, 1] and all(len(r.loss_curve.points()[0]) >= 60 for r in state.ranks.values())


async def _all_events(backend, run_id):
    return [e async for batch in backend.metrics(run_id, follow=False) for e in batch]
