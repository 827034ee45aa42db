"""The health gate's arithmetic (``trainer/check.py``): its sizes and nccl-tests' bus bandwidth;
the sweep itself runs under torchrun in tests/training/test_triage.py."""

from __future__ import annotations

import pytest

from torchdeck.backends.errors import BackendError
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.trainer.check import bus_bandwidth, sizes


def test_sizes_grow_fourfold_from_4_kib_and_bus_bandwidth_is_nccl_tests():
    assert sizes(1 << 20) == [4096, 16384, 65536, 262144, 1048576]
    assert sizes(1000) == [1000]
    assert bus_bandwidth(10.0, 2) == 10.0 and bus_bandwidth(10.0, 4) == 15.0 and bus_bandwidth(10.0, 8) == 17.5
    assert bus_bandwidth(10.0, 1) == 10.0


def test_a_cluster_says_in_one_line_that_its_gate_is_not_built_yet(tmp_path):
    with pytest.raises(BackendError) as raised:
        KubernetesBackend(tmp_path / "no-kubeconfig").check()
    assert "does not run on the kubernetes backend yet" in str(raised.value)
