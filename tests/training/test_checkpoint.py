"""Snapshots: atomic writes, pruning, and falling back past a damaged newest one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from torchdeck.trainer import checkpoint
from torchdeck.trainer.errors import TrainerError


def state(step: int) -> dict:
    return {
        "model": {"w": torch.full((3,), float(step))},
        "model_name": "seed-cnn",
        "optimizer": {},
        "epoch": step // 10,
        "step": step,
    }


def test_save_is_atomic_when_the_writer_dies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint.save(tmp_path, 10, state(10), keep=3)

    def dies_half_way(obj, f):
        f.write(b"PK\x03\x04 half a zip file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(TrainerError, match="No space left on device; ckpt-00000010.pt stays"):
        checkpoint.save(tmp_path, 20, state(20), keep=3)
    # No partial file under the real name, no temporary left behind, the old one intact.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-00000010.pt"]
    assert checkpoint.load_newest(tmp_path).state["step"] == 10


def test_keeps_only_the_newest_k(tmp_path: Path) -> None:
    for step in (5, 10, 15, 20, 25):
        checkpoint.save(tmp_path, step, state(step), keep=2)
    assert [p.name for p in checkpoint.snapshots(tmp_path)] == ["ckpt-00000025.pt", "ckpt-00000020.pt"]


def test_truncated_newest_is_skipped_for_the_previous(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        checkpoint.save(tmp_path, step, state(step), keep=0)
    newest = tmp_path / "ckpt-00000030.pt"
    newest.write_bytes(newest.read_bytes()[:200])  # cut short, as by a crash mid-copy
    (tmp_path / "ckpt-00000040.pt").write_bytes(b"garbage")
    loaded = checkpoint.load_newest(tmp_path)
    assert loaded.path.name == "ckpt-00000020.pt"
    assert torch.equal(loaded.state["model"]["w"], torch.full((3,), 20.0))
    assert [p.name for p, _ in loaded.skipped] == ["ckpt-00000040.pt", "ckpt-00000030.pt"]


def test_snapshot_missing_keys_is_skipped(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, 1, state(1), keep=0)
    checkpoint.save(tmp_path, 2, {"model": {}}, keep=0)
    loaded = checkpoint.load_newest(tmp_path)
    assert loaded.state["step"] == 1 and "missing" in loaded.skipped[0][1]


def test_nothing_loads_means_a_fresh_start(tmp_path: Path) -> None:
    (tmp_path / "ckpt-00000007.pt").write_bytes(b"")
    loaded = checkpoint.load_newest(tmp_path)
    assert loaded.state is None and len(loaded.skipped) == 1
    assert checkpoint.load_newest(tmp_path / "absent").state is None


def test_unsafe_pickles_are_refused(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    import pickle

    with open(tmp_path / "ckpt-00000009.pt", "wb") as f:
        pickle.dump({"model": Evil()}, f)
    loaded = checkpoint.load_newest(tmp_path)
    assert loaded.state is None and loaded.skipped  # weights_only refuses arbitrary objects


def test_unwritable_dir_is_a_trainer_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(TrainerError, match="not writable"):
        checkpoint.prepare_dir(blocker / "sub")


def test_job_start_time_survives_restarts(tmp_path: Path) -> None:
    first = checkpoint.job_start_time(tmp_path)
    assert checkpoint.job_start_time(tmp_path) == first
    (tmp_path / checkpoint.JOB_FILE).write_text("not json")
    assert checkpoint.job_start_time(tmp_path) >= first  # a damaged file is rewritten, not fatal


def test_a_full_volume_mid_run_is_one_line_and_the_last_snapshot_stays(tmp_path: Path) -> None:
    """Issue 16 faults: the volume fills up between two snapshots. The kernel's file-size limit
    (RLIMIT_FSIZE, no privileges needed) makes the second write fail as a full disk does; the
    error is one line, no temporary is left, and the first snapshot still loads."""
    import subprocess
    import sys

    code = f"""
import resource, signal, sys, torch
from pathlib import Path
from torchdeck.trainer import checkpoint
from torchdeck.trainer.errors import TrainerError
folder = Path({str(tmp_path)!r})
state = {{"model": {{"w": torch.zeros(64)}}, "model_name": "m", "optimizer": {{}}, "epoch": 0, "step": 1}}
checkpoint.save(folder, 1, state, keep=3)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # then the write fails with EFBIG, as a full disk fails it
resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))
state["model"]["w"] = torch.ones(4096)
try:
    checkpoint.save(folder, 2, state, keep=3)
except TrainerError as exc:
    print(exc)
    sys.exit(3)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    said = done.stdout.strip()
    assert "\\n" not in said and "cannot write snapshot ckpt-00000002.pt" in said, said
    assert "ckpt-00000001.pt stays" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-00000001.pt"]  # no temporary left
    loaded = checkpoint.load_newest(tmp_path)
    assert loaded.state is not None and loaded.state["step"] == 1


def test_each_attempt_of_a_run_is_counted_in_its_checkpoint_folder_and_runs_apart(tmp_path: Path) -> None:
    """Rank 0 counts each attempt of its run there: a pod made again, or an elastic run's node joining
    again, whose torchrun and store both started over, still come after the attempts before them; a
    run resumed into the same folder counts its own from 1; a damaged file starts the count again."""
    assert checkpoint.next_attempt(None, "a") is None
    assert [checkpoint.next_attempt(tmp_path, "a") for _ in range(3)] == [1, 2, 3]
    assert checkpoint.next_attempt(tmp_path, "b") == 1 and checkpoint.next_attempt(tmp_path, "a") == 4
    (tmp_path / checkpoint.ATTEMPTS_FILE).write_text('{"a": "x", "b": [1]')
    assert checkpoint.next_attempt(tmp_path, "a") == 1
    for i in range(40):
        checkpoint.next_attempt(tmp_path, f"run-{i}")
    kept = json.loads((tmp_path / checkpoint.ATTEMPTS_FILE).read_text())
    assert len(kept) == checkpoint.KEPT_RUNS and kept["run-39"] == 1 and "a" not in kept
