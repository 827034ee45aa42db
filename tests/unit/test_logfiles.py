"""Issue 31: logger files followed as they are written (trainer/logfiles.py). The formats themselves
are checked against the real writers (TensorBoard's SummaryWriter, Lightning's loggers, MLflow) in
tests/training/test_logger_files.py; here, what a follower meets between writes: a record half
written, a file that is no event file, a CSV rewritten with new columns, names that say what a
scalar is, and files a previous run left."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from torchdeck.trainer.logfiles import LoggerFiles, metric_role


def _key(number: int, wire: int) -> bytes:
    return bytes([number << 3 | wire])


def _bytes(number: int, data: bytes) -> bytes:
    assert len(data) < 128
    return _key(number, 2) + bytes([len(data)]) + data


def scalar_event(tag: str, step: int, value: float) -> bytes:
    """One TFRecord holding an Event with one simple_value (the CRCs are not checked by the reader)."""
    value_msg = _bytes(1, tag.encode()) + _key(2, 5) + struct.pack("<f", value)
    event = _key(1, 1) + struct.pack("<d", 1700000000.0) + _key(2, 0) + bytes([step]) + _bytes(5, _bytes(1, value_msg))
    return struct.pack("<Q", len(event)) + b"\0" * 4 + event + b"\0" * 4


def test_a_record_half_written_is_read_once_whole(tmp_path: Path) -> None:
    follower = LoggerFiles(str(tmp_path), since=0)
    path = tmp_path / "runs" / "x" / "events.out.tfevents.1700000000.host.4242.0"
    path.parent.mkdir(parents=True)
    record = scalar_event("train/loss", 7, 0.5)
    path.write_bytes(record[:20])
    assert follower.poll() == []
    with open(path, "ab") as f:
        f.write(record[20:] + scalar_event("val/loss", 7, 0.75))
    records = follower.poll()
    assert [(r["event"], r["step"], r.get("loss"), r.get("val_loss")) for r in records] == [
        ("step", 7, 0.5, None),
        ("eval", 7, None, 0.75),
    ]
    assert follower.poll() == [] and follower.found_loss


def test_other_ranks_files_and_garbage_are_left_alone(tmp_path: Path) -> None:
    (tmp_path / "events.out.tfevents.1700000000.host.99.0").write_bytes(scalar_event("loss", 1, 1.0))
    (tmp_path / "events.out.tfevents.1700000000.host.4242.0").write_bytes(os.urandom(300))
    mine = LoggerFiles(str(tmp_path), since=0, rank=1, pid=4242)
    os.utime(tmp_path / "events.out.tfevents.1700000000.host.4242.0")
    assert mine.poll() == []  # pid 99's file is another rank's; the garbage gives nothing, and no error


def test_a_rewritten_csv_is_read_past_the_rows_already_read(tmp_path: Path) -> None:
    follower = LoggerFiles(str(tmp_path), since=0)
    csv = tmp_path / "logs" / "version_0" / "metrics.csv"
    csv.parent.mkdir(parents=True)
    csv.write_text("epoch,step,train_loss\n0,1,2.0\n0,2,1.5\n")
    assert [(r["step"], r["loss"], r["epoch"]) for r in follower.poll()] == [(1, 2.0, 0), (2, 1.5, 0)]
    csv.write_text("epoch,step,train_loss,val_loss\n0,1,2.0,\n0,2,1.5,\n1,3,1.0,\n1,3,,0.9\n")
    os.utime(csv, (1, 1))  # a new stamp, as a rewrite gives
    assert [(r["event"], r["step"]) for r in follower.poll()] == [("step", 3), ("eval", 3)]


def test_files_there_before_the_follower_began_are_not_read_again(tmp_path: Path) -> None:
    old = tmp_path / "events.out.tfevents.1.host.1.0"
    old.write_bytes(scalar_event("loss", 1, 9.0))  # a previous attempt's: read by its own follower
    follower = LoggerFiles(str(tmp_path), since=0)
    new = tmp_path / "events.out.tfevents.2.host.2.0"
    new.write_bytes(scalar_event("loss", 2, 1.0))
    assert [r["loss"] for r in follower.poll()] == [1.0]


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("loss", "loss"), ("train/loss", "loss"), ("Loss/train", "loss"), ("train_loss_step", "loss"),
        ("val_loss", "val_loss"), ("Loss/test", "val_loss"), ("eval_loss", "val_loss"), ("loss_val", "val_loss"),
        ("val/acc", "val_accuracy"), ("Accuracy/test", "val_accuracy"), ("accuracy", "accuracy"),
        ("v_num", None), ("epoch", None), ("learning_rate", None), ("grad_norm", None),
    ],
)  # fmt: skip
def test_a_scalars_name_says_what_it_is(name: str, role: str | None) -> None:
    assert metric_role(name) == role


def test_the_spec_names_a_scalar_its_name_does_not_say(tmp_path: Path) -> None:
    follower = LoggerFiles(str(tmp_path), since=0, tags={"loss": "objective"})
    (tmp_path / "events.out.tfevents.1.host.5.0").write_bytes(scalar_event("objective", 3, 0.25))
    assert [(r["event"], r["loss"]) for r in follower.poll()] == [("step", 0.25)]


def test_hugging_faces_trainer_state_gives_its_log_history_and_totals(tmp_path: Path) -> None:
    """The file Hugging Face's Trainer rewrites at each save (checkpoint-N/trainer_state.json)."""
    import json

    follower = LoggerFiles(str(tmp_path), since=0)
    state = tmp_path / "out" / "checkpoint-20" / "trainer_state.json"
    state.parent.mkdir(parents=True)
    history = [
        {"epoch": 0.5, "grad_norm": 1.2, "learning_rate": 4e-05, "loss": 2.31, "step": 10},
        {"epoch": 1.0, "grad_norm": 0.9, "learning_rate": 3e-05, "loss": 1.87, "step": 20},
        {"epoch": 1.0, "eval_loss": 1.95, "eval_accuracy": 0.61, "eval_runtime": 3.2, "step": 20},
    ]
    state.write_text(json.dumps({"global_step": 20, "max_steps": 80, "num_train_epochs": 4, "log_history": history}))
    records = follower.poll()
    assert [(r["event"], r["step"], r.get("loss"), r.get("val_loss"), r.get("accuracy")) for r in records] == [
        ("step", 10, 2.31, None, None),
        ("step", 20, 1.87, None, None),
        ("eval", 20, None, 1.95, 0.61),
    ]
    assert all(r["total_steps"] == 80 and r["epochs"] == 4 for r in records)
    history.append({"epoch": 1.5, "loss": 1.5, "step": 30})
    state.write_text(json.dumps({"max_steps": 80, "log_history": history}))
    os.utime(state, (2, 2))
    assert [(r["step"], r["loss"]) for r in follower.poll()] == [(30, 1.5)]
