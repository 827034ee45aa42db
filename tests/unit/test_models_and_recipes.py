"""Networks, recipes, the learning-rate schedule and device placement,
including the GPU paths' shape and fallbacks on a CPU-only machine."""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import pytest
import torch
from torch import nn

from torchdeck.trainer import hardware, models
from torchdeck.trainer.errors import TrainerError
from torchdeck.trainer.recipes import RECIPES, lr_at


def test_seed_cnn_has_the_seed_workshops_layer_plan() -> None:
    net = models.SeedCNN()
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [32, 64, 128, 128, 256, 256]
    assert all(c.kernel_size == (3, 3) for c in convs)
    assert sum(isinstance(m, nn.MaxPool2d) for m in net.modules()) == 3
    assert sum(isinstance(m, nn.BatchNorm2d) for m in net.modules()) == 3
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(4096, 512), (512, 10)]
    assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_fast_resnet_shape_and_whitening() -> None:
    torch.manual_seed(0)
    net: Any = models.build_model("resnet-fast")
    assert net(torch.zeros(3, 3, 32, 32)).shape == (3, 10)
    images = torch.randn(64, 3, 32, 32) * torch.tensor([1.0, 2.0, 0.5]).view(1, 3, 1, 1)
    net.init_whitening(images)
    assert not net.whiten.weight.requires_grad
    out = net.whiten(images) - net.whiten.bias.view(1, -1, 1, 1)
    half = out[:, : net.whiten.out_channels // 2].transpose(0, 1).reshape(net.whiten.out_channels // 2, -1)
    cov = torch.cov(half)
    # The stem turns correlated 2x2 patches into (nearly) unit-variance, uncorrelated channels.
    assert torch.allclose(torch.diag(cov), torch.ones(len(cov)), atol=0.1)
    assert (cov - torch.diag(torch.diag(cov))).abs().max() < 0.1


def test_resnet18_needs_torchvision() -> None:
    try:
        import torchvision  # noqa: F401

        has_torchvision = True
    except Exception:
        has_torchvision = False
    if has_torchvision:
        assert models.build_model("resnet18")(torch.zeros(1, 3, 32, 32)).shape == (1, 10)
    else:
        with pytest.raises(models.ModelUnavailable, match="needs torchvision"):
            models.build_model("resnet18")
    with pytest.raises(models.ModelUnavailable, match="unknown model"):
        models.build_model("vgg")


def test_seed_recipe_is_the_seed_workshops() -> None:
    seed = RECIPES["seed"]
    assert (seed.model, seed.epochs, seed.batch_size, seed.lr, seed.momentum, seed.weight_decay) == (
        "seed-cnn",
        10,
        128,
        1e-3,
        0.9,
        1e-4,
    )
    assert not seed.nesterov and not seed.augment and not seed.reshuffle and not seed.standardise
    assert seed.label_smoothing == 0 and seed.schedule == "constant" and seed.precision == "fp32"
    assert seed.peak_lr(256) == seed.peak_lr(4096) == 1e-3  # the seed never scaled its rate


def test_fast_recipe_schedule_scales_with_the_global_batch() -> None:
    fast = RECIPES["fast"]
    assert fast.nesterov and fast.label_smoothing > 0 and fast.channels_last and fast.augment
    assert fast.peak_lr(512) == pytest.approx(2 * fast.peak_lr(256))
    total, peak = 100, fast.peak_lr(256)
    rates = [lr_at(fast, s, total, peak) for s in range(total)]
    top = rates.index(max(rates))
    assert rates[0] < peak / 10 and max(rates) == pytest.approx(peak)
    assert all(a <= b for a, b in zip(rates[:top], rates[1 : top + 1]))  # warm-up rises
    assert all(a >= b for a, b in zip(rates[top:], rates[top + 1 :]))  # then decays
    assert rates[-1] < peak / 50


def test_placement_on_a_cpu_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = hardware.choose_placement("auto", "auto", 0)
    assert cpu.device.type == "cpu" and cpu.backend == "gloo"
    assert cpu.amp_dtype == (torch.bfloat16 if hardware.cpu_has_bf16() else None)
    assert hardware.choose_placement("cpu", "fp32", 0).precision == "fp32"
    with pytest.raises(TrainerError, match="CUDA is not available"):
        hardware.choose_placement("cuda", "auto", 0)
    with pytest.raises(TrainerError, match="needs CUDA"):
        hardware.choose_placement("cpu", "fp16", 0)


def test_placement_on_a_gpu_node_picks_nccl_and_one_gpu_per_local_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen: list[Any] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    gpu = hardware.choose_placement("auto", "auto", 1)
    assert gpu.device == torch.device("cuda", 1) and gpu.backend == "nccl" and chosen == [1]
    assert gpu.amp_dtype == torch.float16  # no bf16 on this GPU: fp16 with a grad scaler
    with pytest.raises(TrainerError, match="has no GPU of its own"):
        hardware.choose_placement("cuda", "auto", 2)


def test_gpu_probe_reports_nothing_on_cpu_and_both_fields_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = hardware.GpuProbe(torch.device("cpu"))
    sum(i * i for i in range(200_000))  # some CPU time of this process's own between the marks
    sampled = cpu.sample()
    assert list(sampled) == ["cpu_util"] and 0 < sampled["cpu_util"] <= 100 * (os.cpu_count() or 1)
    # NVML stand-in: the probe's CUDA path, shape only (CI has no GPU).
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=87),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 * 2**20)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    probe = hardware.GpuProbe(torch.device("cuda", 1))
    assert probe._handle == ("handle", 7)  # local index 1 is physical GPU 7
    assert {k: v for k, v in probe.sample().items() if k != "cpu_util"} == {"gpu_util": 87.0, "gpu_mem_mb": 3.0}
    # Without NVML, utilisation is null rather than a crash.
    monkeypatch.setitem(sys.modules, "pynvml", None)
    without = hardware.GpuProbe(torch.device("cuda", 0)).sample()
    assert {k: v for k, v in without.items() if k != "cpu_util"} == {"gpu_util": None, "gpu_mem_mb": 3.0}
