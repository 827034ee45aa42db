"""Fixtures shared by the test suite: the real CIFAR-10 subset and tiny
generated data sets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tinydata import write_tiny_cifar

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def cifar_dir() -> Path:
    """The real CIFAR-10 subset: $TORCHDECK_TEST_DATA or ../shared/data/cifar10-subset.
    .ci/run insists on it, so this skip only happens outside CI."""
    root = Path(os.environ.get("TORCHDECK_TEST_DATA", REPO.parent / "shared" / "data" / "cifar10-subset"))
    if not (root / "cifar-10-batches-py" / "test_batch").is_file():
        pytest.skip(f"real CIFAR-10 subset not found at {root} (set TORCHDECK_TEST_DATA)")
    return root


@pytest.fixture
def tiny_cifar(tmp_path: Path) -> Path:
    write_tiny_cifar(tmp_path / "data")
    return tmp_path / "data"


pytest_plugins = ["phases", "aws_server", "eks_support", "kube_jobs", "real_cluster"]

SLOW_FOLDERS = ("training", "package", "image", "cluster")
"""Every test in these is slow: real torchrun jobs, a wheel built and installed, a real Docker engine, a real
Kubernetes cluster. The fast lane
(``./scripts/test --fast``, ``-m "not slow"``) leaves them out; ``./scripts/test`` and CI run all."""


LAST_FOLDERS = ("image", "cluster")
"""Run last, in this order: the real Docker engine, then the real cluster, whose fixtures live for the
session (one start, one image build and load) and end with it, so no other test shares the machine
with the cluster."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)
    last = {folder: place + 1 for place, folder in enumerate(LAST_FOLDERS)}
    items.sort(key=lambda item: last.get(item.path.parent.name, 0))  # stable: each folder's own order kept
