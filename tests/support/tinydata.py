"""A CIFAR-10 'python version' layout of random images, for tests of mechanics."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np


def write_tiny_cifar(
    root: Path, per_batch: int = 40, bytes_keys: bool = True, seed: int = 0, train_batches: int = 5
) -> Path:
    """Write a CIFAR-10 'python version' layout of ``per_batch`` images a batch,
    with Python-2-style byte keys (as the official archive) or str keys."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    key = (lambda k: k.encode()) if bytes_keys else (lambda k: k)
    names = [f"data_batch_{i}" for i in range(1, train_batches + 1)] + ["test_batch"]
    for n, name in enumerate(names):
        labels = [(i + n) % 10 for i in range(per_batch)]
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        with open(folder / name, "wb") as f:
            pickle.dump({key("data"): data, key("labels"): labels, key("batch_label"): name}, f, protocol=2)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(
            {
                key("label_names"): [
                    c.encode() if bytes_keys else c
                    for c in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
                ]
            },
            f,
            protocol=2,
        )
    return folder
