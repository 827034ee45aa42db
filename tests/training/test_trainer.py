"""The training program as a user runs it: one rank in a subprocess, on tiny
data. (Several ranks under torchrun: test_distributed.py.)"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from tinydata import write_tiny_cifar
from trainer_runs import records, run_evaluate, run_trainer

from torchdeck.trainer import metrics
from torchdeck.trainer.models import SeedCNN

COMMON: dict[str, Any] = {
    "schema": int,
    "event": str,
    "rank": int,
    "local_rank": int,
    "world_size": int,
    "host": str,
    "time": float,
    "elapsed_s": (int, float),
}
BY_EVENT = {
    "start": (
        "model",
        "recipe",
        "dataset",
        "device",
        "precision",
        "global_batch",
        "epochs",
        "steps_per_epoch",
        "total_steps",
        "train_size",
        "test_size",
        "params",
        "restart_count",
    ),
    "step": ("epoch", "step", "loss", "lr", "samples_per_s", "step_s", "data_s"),
    "epoch": ("epoch", "step", "loss", "samples_per_s", "epoch_s"),
    "eval": ("epoch", "step", "accuracy", "loss", "per_class"),
    "checkpoint": ("epoch", "step", "path", "bytes", "save_s"),
    "resume": ("epoch", "step", "path", "restart_count", "skipped"),
    "done": ("epoch", "step", "accuracy", "best_accuracy", "model_file", "train_s"),
}


def quick(data_dir: Path, ckpt: Path, *extra: str) -> tuple[str, ...]:
    return (
        "--data-dir",
        str(data_dir),
        "--checkpoint-dir",
        str(ckpt),
        "--batch-size",
        "16",
        "--model",
        "seed-cnn",
        "--recipe",
        "seed",
        *extra,
    )


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_metric_lines_follow_schema_1(tiny_cifar: Path, tmp_path: Path) -> None:
    metrics_file = tmp_path / "m" / "metrics-{rank}.jsonl"
    proc = run_trainer(
        *quick(
            tiny_cifar, tmp_path / "ck", "--epochs", "2", "--checkpoint-every", "5", "--metrics-file", str(metrics_file)
        )
    )
    assert proc.returncode == 0, proc.stderr
    lines = records(proc.stdout)
    events = [r["event"] for r in lines]
    assert events[0] == "start" and events[-1] == "done"
    assert {"step", "epoch", "eval", "checkpoint"} <= set(events)
    for r in lines:
        for key, kind in COMMON.items():
            assert isinstance(r[key], kind), (key, r)
        assert r["schema"] == metrics.SCHEMA_VERSION and r["event"] in metrics.EVENTS
        for key in BY_EVENT[r["event"]]:
            assert key in r, (r["event"], key)
        assert "gpu_util" not in r  # CPU run: no GPU fields
    steps = [r for r in lines if r["event"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 2 * 13 + 1))  # 200 images / 16 = 13 steps an epoch
    assert all(math.isfinite(r["loss"]) and r["samples_per_s"] > 0 and r["lr"] == 1e-3 for r in steps)
    evals = [r for r in lines if r["event"] == "eval"]
    assert [e["epoch"] for e in evals] == [1, 2] and all(0 <= e["accuracy"] <= 1 for e in evals)
    assert len(evals[0]["per_class"]) == 10
    ckpts = [r for r in lines if r["event"] == "checkpoint"]
    assert [c["step"] for c in ckpts] == [5, 10, 13, 15, 20, 25, 26]
    assert [c["epoch"] for c in ckpts] == [1, 1, 1, 2, 2, 2, 2]
    times = [r["elapsed_s"] for r in lines]
    assert times == sorted(times)
    # The metrics file holds exactly the JSON lines of stdout.
    written = (tmp_path / "m" / "metrics-0.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in written] == lines
    assert metrics.parse_line(written[1]) == lines[1] and metrics.parse_line("epoch 1 done") is None


def test_resume_continues_skips_a_corrupt_newest_checkpoint_and_refuses_another_models(
    tiny_cifar: Path, tmp_path: Path
) -> None:
    """One checkpoint folder through four runs (a process each, so kept to one test)."""
    ck = tmp_path / "ck"
    first = run_trainer(*quick(tiny_cifar, ck, "--max-steps", "4", "--checkpoint-every", "2"))
    assert first.returncode == 0, first.stderr
    first_lines = records(first.stdout)
    second = run_trainer(*quick(tiny_cifar, ck, "--max-steps", "8", "--checkpoint-every", "2"))
    assert second.returncode == 0, second.stderr
    lines = records(second.stdout)
    resume = next(r for r in lines if r["event"] == "resume")
    assert resume["step"] == 4 and resume["restart_count"] == 0 and resume["skipped"] == []
    steps = [r["step"] for r in lines if r["event"] == "step"]
    assert steps == [5, 6, 7, 8]
    # elapsed_s counts from the job's first start, across runs.
    assert lines[0]["elapsed_s"] >= first_lines[-1]["elapsed_s"]
    assert (ck / "model.pt").is_file()

    # the newest snapshot cut in half: skipped with a warning, and the one before it taken
    newest = ck / "ckpt-00000008.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    third = run_trainer(*quick(tiny_cifar, ck, "--max-steps", "10"))
    assert third.returncode == 0, third.stderr
    resume = next(r for r in records(third.stdout) if r["event"] == "resume")
    assert resume["step"] == 6 and resume["skipped"] == ["ckpt-00000008.pt"]
    assert "skipping unreadable checkpoint ckpt-00000008.pt" in third.stderr
    assert [r["step"] for r in records(third.stdout) if r["event"] == "step"][0] == 7

    # another network (the default recipe's) refuses this folder's snapshots in one line
    proc = run_trainer(
        "--data-dir", str(tiny_cifar), "--checkpoint-dir", str(ck), "--max-steps", "12", "--batch-size", "16"
    )
    assert proc.returncode == 2
    assert "written by model 'seed-cnn', not 'resnet-fast'" in one_error_line(proc.stderr)
    assert records(proc.stdout)[-1]["event"] == "error"


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    malformed = write_tiny_cifar(tmp_path / "malformed", per_batch=4)
    (malformed / "data_batch_1").write_bytes(b"\x80\x02garbage")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    tiny = tmp_path / "tiny"
    write_tiny_cifar(tiny, per_batch=8)
    return {
        "missing data dir": (["--data-dir", str(tmp_path / "nope")], "does not exist"),
        "empty data dir": (["--data-dir", str(tmp_path)], "no CIFAR-10 batches"),
        "malformed data": (["--data-dir", str(tmp_path / "malformed")], "cannot read CIFAR-10 batch"),
        "unwritable checkpoint dir": (
            ["--data-dir", str(tiny), "--checkpoint-dir", str(blocker / "ck")],
            "is not writable",
        ),
        "cuda without CUDA": (["--data-dir", str(tiny), "--device", "cuda"], "CUDA is not available"),
        "fp16 on a CPU": (["--data-dir", str(tiny), "--device", "cpu", "--precision", "fp16"], "needs CUDA"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing data dir",
        "empty data dir",
        "malformed data",
        "unwritable checkpoint dir",
        "cuda without CUDA",
        "fp16 on a CPU",
    ],
)
def test_bad_input_ends_with_one_clear_line(tmp_path: Path, case: str) -> None:
    if case == "cuda without CUDA" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")  # CI never does
    args, expected = _bad_inputs(tmp_path)[case]
    proc = run_trainer(*args)
    assert proc.returncode == 2
    line = one_error_line(proc.stderr)
    assert line.startswith("torchdeck.trainer: error: ") and expected in line and "(hint: " in line
    error = records(proc.stdout)[-1]
    assert error["event"] == "error" and expected in error["message"] and error["hint"]


def test_synthetic_dataset_needs_no_files(tmp_path: Path) -> None:
    proc = run_trainer(
        "--dataset",
        "synthetic",
        "--synthetic-size",
        "256",
        "--max-steps",
        "3",
        "--batch-size",
        "32",
        "--model-file",
        str(tmp_path / "m.pt"),
    )
    assert proc.returncode == 0, proc.stderr
    start = records(proc.stdout)[0]
    assert start["dataset"] == "synthetic" and start["model"] == "resnet-fast" and start["recipe"] == "fast"
    assert (tmp_path / "m.pt").is_file()


# -- the evaluate program ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_model(tmp_path_factory) -> tuple[Path, Path, dict]:
    root = tmp_path_factory.mktemp("evaluate")
    write_tiny_cifar(root / "data", per_batch=30)
    proc = run_trainer(*quick(root / "data", root / "ck", "--epochs", "1"))
    assert proc.returncode == 0, proc.stderr
    done = records(proc.stdout)[-1]
    return root / "ck" / "model.pt", root / "data", done


def test_evaluate_prints_the_seed_workshops_report(trained_model) -> None:
    model_file, data_dir, done = trained_model
    proc = run_evaluate("--model-file", str(model_file), "--data-dir", str(data_dir))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"Accuracy of the network on the 30 test images: {100 * done['accuracy']:.1f} %"
    assert [ln.split(":")[1].split(" is ")[0].strip() for ln in lines[1:]] == [
        "plane",
        "car",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    ]
    assert all(ln.startswith("Accuracy for class: ") and ln.endswith(" %") for ln in lines[1:])


def test_evaluate_json_agrees_with_the_trainer(trained_model) -> None:
    model_file, data_dir, done = trained_model
    from torchdeck.backends.events import tool_result

    proc = run_evaluate("--model-file", str(model_file), "--data-dir", str(data_dir), "--output", "json")
    result = tool_result(proc.stdout)  # its one schema-1 result line, as the backends read it
    assert result is not None and len(proc.stdout.splitlines()) == 1
    assert result["model"] == "seed-cnn" and result["images"] == 30
    assert result["accuracy"] == pytest.approx(done["accuracy"], abs=1e-4)
    per_class = result["per_class"]
    assert sum(v["images"] for v in per_class.values()) == 30
    correct = sum(v["accuracy"] * v["images"] for v in per_class.values())
    assert correct / 30 == pytest.approx(result["accuracy"])


def test_evaluate_reads_a_bare_state_dict_and_refuses_another_networks(tmp_path: Path, trained_model, capsys) -> None:
    """In this process (``evaluate.main``; the tests above run it as a program): four model files."""
    from torchdeck.trainer.evaluate import main

    _, data_dir, _ = trained_model

    def evaluate(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--data-dir", str(data_dir)])
        out, err = capsys.readouterr()
        return code, out, err

    bare = tmp_path / "seed.pth"
    torch.save(SeedCNN().state_dict(), bare)  # as the seed workshop saved its model
    code, out, _ = evaluate("--model-file", str(bare), "--model", "seed-cnn")
    assert code == 0 and out.startswith("Accuracy of the network on the 30 test images")
    code, _, err = evaluate("--model-file", str(bare), "--model", "resnet-fast")
    assert code == 2 and "do not fit model 'resnet-fast'" in one_error_line(err)
    code, _, err = evaluate("--model-file", str(bare))
    assert code == 2 and "pass --model" in one_error_line(err)
    code, _, err = evaluate("--model-file", str(tmp_path / "none.pt"))
    assert code == 2 and "does not exist" in one_error_line(err)
