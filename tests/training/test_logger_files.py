"""Issue 31: training code that reports through the usual loggers, run unmodified with ``torchdeck
train``, in a user's own virtual environment holding the real libraries from PyPI (.venv-user,
made by scripts/user-venv.sh): a Lightning ``Trainer(strategy="ddp")`` on 2 CPU ranks under
torchrun (its TensorBoard logger and tqdm bar), a ``SummaryWriter``-only script that prints nothing,
a script that logs to MLflow's file store and Lightning's CSVLogger, one that logs to MLflow's default
(SQLite) store, and Hugging Face's ``Trainer`` on 2 ranks (its printed log dicts, its bar, and its
checkpoints' ``trainer_state.json``). Each run's per-rank
curves, steps, epochs and validation losses are read back as ``status --output json`` and the
monitor's state give them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from local_runs import cli_env, monitor_snapshot, run_cli

from torchdeck.backends.local import LocalBackend
from torchdeck.monitor.state import MonitorSnapshot

REPO = Path(__file__).resolve().parents[2]
USER_PYTHON = REPO / ".venv-user" / "bin" / "python"


@pytest.fixture(scope="module")
def user_python() -> str:
    if not USER_PYTHON.exists():
        pytest.fail("no .venv-user: ./scripts/test makes it (scripts/user-venv.sh), with the libraries users bring")
    return str(USER_PYTHON)


def train(tmp: Path, script: str, python: str, *args: str) -> tuple[LocalBackend, dict, MonitorSnapshot]:
    code, state = tmp / "project", tmp / "state"
    code.mkdir()
    (code / "train.py").write_text(script)
    env = cli_env(state)
    done = run_cli(["train", "train.py", "--python", python, *args], env, code, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    backend = LocalBackend(state)
    (status,) = backend.list()
    shown = json.loads(run_cli(["status", status.run_id, "--output", "json"], env, code).stdout)

    return backend, shown, monitor_snapshot(backend, status.run_id)


SUMMARY_WRITER = """
import torch
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter()  # runs/DATE_HOST: TensorBoard's default folder
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
step = 0
for epoch in range(3):
    for _ in range(10):
        x = torch.randn(16, 8)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        step += 1
        writer.add_scalar("Loss/train", loss.item(), step)
    with torch.no_grad():
        x = torch.randn(64, 8)
        writer.add_scalar("Loss/test", ((model(x) - x.sum(1, keepdim=True)) ** 2).mean().item(), step)
        writer.add_scalar("Accuracy/test", 0.5 + epoch / 10, step)
    writer.flush()
writer.close()
"""


def test_a_summary_writer_script_that_prints_nothing_has_every_ranks_curve(tmp_path, user_python):
    """Both ranks write a SummaryWriter into the same folder (TensorBoard names each file after its
    process): each rank's curve comes from its own file."""
    _, shown, snap = train(tmp_path, SUMMARY_WRITER, user_python, "--nproc-per-node", "2")
    assert shown["state"] == "succeeded" and shown["step"] == 30 and shown["loss"] is not None
    assert shown["val_loss"] is not None and shown["accuracy"] == pytest.approx(0.7)
    assert [(r["rank"], r["step"]) for r in shown["ranks"]] == [(0, 30), (1, 30)]
    for rank in (0, 1):
        steps, losses = snap.curves[rank]
        assert list(steps) == list(range(1, 31)) and all(loss >= 0 for loss in losses), rank  # every step, once
    assert snap.curves[0][1] != snap.curves[1][1]  # each rank its own values
    assert len(snap.val_losses) == 6 and snap.evals[-1][1] == pytest.approx(0.7)


LIGHTNING = """
import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def data(n):
    x = torch.randn(n, 8)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


if __name__ == "__main__":
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, log_every_n_steps=2,
        enable_checkpointing=False, enable_model_summary=False,
    )
    trainer.fit(Regression(), data(160), data(32))
"""


def test_a_lightning_ddp_script_shows_its_curve_steps_epochs_and_total(tmp_path, user_python):
    """Lightning prints its bar (rich's, where rich is installed, as here) and logs from rank 0 only:
    rank 0's curve comes from its TensorBoard logger, its step, epoch and total from the bar as it
    redraws; rank 1 is there, and done."""
    backend, shown, snap = train(tmp_path, LIGHTNING, user_python, "--nproc-per-node", "2")
    # 160 samples, batch 8, 2 ranks: 10 steps an epoch, 2 epochs
    assert shown["state"] == "succeeded" and (shown["step"], shown["epoch"], shown["epochs"]) == (20, 1, 2)
    assert shown["total_steps"] == 20 and shown["val_loss"] is not None and snap.val_losses
    assert [(r["rank"], r["state"]) for r in shown["ranks"]] == [(0, "done"), (1, "done")]
    steps, losses = snap.curves[0]  # the logger's points (every 2 steps), not the bar's rounded postfix
    assert len(steps) >= 8 and list(steps) == sorted(steps) and all(loss >= 0 for loss in losses)
    run_dir = Path(shown["location"])
    bar = [json.loads(line) for line in (run_dir / "metrics" / "rank-0.jsonl").read_text().splitlines()]
    bar = [r for r in bar if r["event"] == "step" and r.get("source") == "text"]
    assert len(bar) >= 2 and bar[-1]["step"] == 20 and bar[-1]["steps_per_s"] > 0  # read as it redrew
    assert not any("hung" in e for e in snap.errors)


MLFLOW_AND_CSV = """
import os
os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 asks for this to keep its file store
import mlflow
from lightning.pytorch.loggers import CSVLogger

mlflow.set_tracking_uri("file:" + os.path.abspath("mlruns"))  # MLflow's file store
csv = CSVLogger("csv_logs")
with mlflow.start_run():
    for step in range(1, 13):
        mlflow.log_metric("training_loss", 2.0 / step, step=step)
        if step % 4 == 0:
            csv.log_metrics({"val_loss": 1.0 / step, "val_acc": step / 20}, step=step)
            csv.save()
"""


def test_mlflow_file_store_and_lightning_csv_metrics_are_read(tmp_path, user_python):
    _, shown, snap = train(tmp_path, MLFLOW_AND_CSV, user_python, "--nproc-per-node", "1")
    assert shown["state"] == "succeeded" and shown["step"] == 12 and shown["loss"] == pytest.approx(2.0 / 12)
    steps, losses = snap.curves[0]
    assert list(steps) == list(range(1, 13)) and losses[0] == pytest.approx(2.0)
    assert [v for _, v in snap.val_losses] == pytest.approx([1 / 4, 1 / 8, 1 / 12])
    assert shown["accuracy"] == pytest.approx(0.6)


MLFLOW_DEFAULT = """
import mlflow

with mlflow.start_run():  # no tracking URI: MLflow 3's default, sqlite:///mlflow.db here
    for step in range(1, 9):
        mlflow.log_metric("loss", 1.0 / step, step=step)
    mlflow.log_metric("val_loss", 0.2, step=8)
"""


def test_mlflows_default_sqlite_store_is_read(tmp_path, user_python):
    _, shown, snap = train(tmp_path, MLFLOW_DEFAULT, user_python, "--nproc-per-node", "1")
    assert (tmp_path / "project" / "mlflow.db").exists()
    assert shown["state"] == "succeeded" and shown["step"] == 8 and shown["loss"] == pytest.approx(1 / 8)
    steps, losses = snap.curves[0]
    assert list(steps) == list(range(1, 9)) and losses[1] == pytest.approx(0.5)
    assert shown["val_loss"] == pytest.approx(0.2)


HUGGING_FACE = """
import torch
from torch import nn
from transformers import Trainer, TrainingArguments


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 1)

    def forward(self, x, labels=None):
        out = self.linear(x).squeeze(-1)
        return {"loss": nn.functional.mse_loss(out, labels), "logits": out}


def data(n, seed):
    xs = torch.randn(n, 8, generator=torch.Generator().manual_seed(seed))
    return [{"x": x, "labels": x.sum()} for x in xs]


args = TrainingArguments(
    output_dir="out", per_device_train_batch_size=8, num_train_epochs=2, learning_rate=0.05,
    logging_steps=2, eval_strategy="epoch", save_strategy="epoch", report_to="none",
    use_cpu=True, ddp_backend="gloo",
)
Trainer(model=Regressor(), args=args, train_dataset=data(160, 0), eval_dataset=data(32, 1)).train()
"""


def test_hugging_faces_trainer_on_two_ranks_shows_its_curve_steps_and_evaluations(tmp_path, user_python):
    """Hugging Face's ``Trainer`` prints its logs as dicts of quoted numbers over its bar (rank 0
    only), draws its evaluation bar under the training bar, and writes ``trainer_state.json`` into
    each checkpoint, each repeating the history before it: one curve, each step once, the
    evaluations as validation losses, the run's mean loss at the end no step of its own."""
    backend, shown, snap = train(tmp_path, HUGGING_FACE, user_python, "--nproc-per-node", "2")
    # 160 samples, batch 8, 2 ranks: 10 steps an epoch, 2 epochs, a log every 2 steps
    assert shown["state"] == "succeeded" and (shown["step"], shown["total_steps"]) == (20, 20)
    assert (shown["epoch"], shown["epochs"]) == (1, 2)
    assert len(snap.val_losses) == 2 and [r["rank"] for r in shown["ranks"]] == [0, 1]
    run_dir = Path(shown["location"])
    records = [json.loads(line) for line in (run_dir / "metrics" / "rank-0.jsonl").read_text().splitlines()]
    logged = [r["step"] for r in records if r["event"] == "step" and r.get("source") == "logger"]
    assert logged == list(range(2, 21, 2))  # checkpoint-10's history and checkpoint-20's, once
    printed = [r for r in records if r["event"] == "step" and r.get("source") == "text"]
    assert printed and all(r["total_steps"] == 20 for r in printed)  # never the evaluation bar's 2
    assert any(r.get("loss") is not None and r["step"] % 2 == 0 for r in printed)  # a dict, at its bar's step
    assert [r for r in records if r["event"] == "eval" and r.get("source") == "text"]
    steps, losses = snap.curves[0]
    assert list(steps) == sorted(set(steps)) and shown["loss"] == pytest.approx(losses[-1])
