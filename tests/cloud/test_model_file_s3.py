"""The final model to and from s3:// through boto3, against moto's server mode."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from tinydata import write_tiny_cifar
from trainer_runs import records, run_evaluate, run_trainer, trainer_env

from torchdeck.backends.events import tool_result

pytestmark = pytest.mark.slow  # the fast lane (./scripts/test --fast) leaves these out


def test_model_file_round_trips_through_s3(tmp_path: Path, aws_env: dict[str, str]) -> None:
    boto3.client("s3").create_bucket(Bucket="models")
    write_tiny_cifar(tmp_path / "data", per_batch=20)
    url = "s3://models/runs/demo/model.pt"
    env = trainer_env()  # taken after aws_env set the endpoint and test credentials
    proc = run_trainer(
        "--data-dir",
        str(tmp_path / "data"),
        "--recipe",
        "seed",
        "--batch-size",
        "25",
        "--max-steps",
        "2",
        "--model-file",
        url,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert records(proc.stdout)[-1]["model_file"] == url
    head = boto3.client("s3").head_object(Bucket="models", Key="runs/demo/model.pt")
    assert head["ContentLength"] > 100_000

    out = run_evaluate("--model-file", url, "--data-dir", str(tmp_path / "data"), "--output", "json", env=env)
    assert out.returncode == 0, out.stderr
    result = tool_result(out.stdout)
    assert result is not None and result["model"] == "seed-cnn"


def test_missing_bucket_is_one_clear_line(tmp_path: Path, aws_env: dict[str, str]) -> None:
    proc = run_trainer(
        "--dataset",
        "synthetic",
        "--synthetic-size",
        "64",
        "--recipe",
        "seed",
        "--batch-size",
        "32",
        "--max-steps",
        "1",
        "--model-file",
        "s3://no-such-bucket/m.pt",
        env=trainer_env(),
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot upload the model to s3://no-such-bucket/m.pt" in lines[0]
    assert "Traceback" not in proc.stderr
