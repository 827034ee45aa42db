"""Training recipes: every hyper-parameter that is not a command-line option.

``seed`` reproduces the seed workshop's script exactly, for comparison.
``fast`` (the default) is tuned for test accuracy per second of wall time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Recipe:
    """How to train: optimiser, schedule, data treatment and numerics."""

    name: str
    model: str
    epochs: int
    batch_size: int
    """Per rank."""
    lr: float
    """Peak learning rate for a global batch of ``lr_reference_batch``; scaled linearly with the real global batch."""
    lr_reference_batch: int | None
    """None: the same rate whatever the global batch (the seed's script)."""
    momentum: float
    nesterov: bool
    weight_decay: float
    decay_norm_and_bias: bool
    """Whether weight decay also applies to norm weights and biases (the seed's did)."""
    label_smoothing: float
    schedule: str
    """``constant`` or ``onecycle`` (linear warm-up to the peak, then linear decay to zero)."""
    warmup_fraction: float
    augment: bool
    """Random translation and alternating horizontal flip."""
    reshuffle: bool
    """A new sample order every epoch (the seed's script used one order throughout)."""
    standardise: bool
    """Normalise by CIFAR-10's channel mean and std (else scale to [0, 1] as the seed did)."""
    precision: str
    """``auto`` (bf16 autocast where the CPU or GPU supports it) or ``fp32``."""
    channels_last: bool
    tta: bool
    """Evaluate on each image and its mirror image, averaging the logits."""
    description: str = field(default="", compare=False)

    def scaled(self, **changes: Any) -> Recipe:
        return replace(self, **changes)

    def peak_lr(self, global_batch: int) -> float:
        if self.lr_reference_batch is None:
            return self.lr
        return self.lr * global_batch / self.lr_reference_batch


RECIPES: dict[str, Recipe] = {
    "fast": Recipe(
        name="fast",
        model="resnet-fast",
        epochs=30,
        batch_size=128,
        lr=0.4,
        lr_reference_batch=256,
        momentum=0.9,
        nesterov=True,
        weight_decay=5e-4,
        decay_norm_and_bias=False,
        label_smoothing=0.2,
        schedule="onecycle",
        warmup_fraction=0.2,
        augment=True,
        reshuffle=True,
        standardise=True,
        precision="auto",
        channels_last=True,
        tta=True,
        description="most test accuracy per second: small whitened ResNet, label smoothing, "
        "one-cycle Nesterov SGD scaled with the global batch, bf16 where supported",
    ),
    "seed": Recipe(
        name="seed",
        model="seed-cnn",
        epochs=10,
        batch_size=128,
        lr=1e-3,
        lr_reference_batch=None,
        momentum=0.9,
        nesterov=False,
        weight_decay=1e-4,
        decay_norm_and_bias=True,
        label_smoothing=0.0,
        schedule="constant",
        warmup_fraction=0.0,
        augment=False,
        reshuffle=False,
        standardise=False,
        # channels_last changes the memory layout, not the arithmetic (still fp32):
        # the same hyper-parameters, about 30% more images/s on a CPU.
        precision="fp32",
        channels_last=True,
        tta=False,
        description="the seed workshop's script: SGD(lr=1e-3, momentum=0.9, weight_decay=1e-4), "
        "batch 128 per worker, no augmentation, one sample order",
    ),
}
DEFAULT_RECIPE = "fast"


def lr_at(recipe: Recipe, step: int, total_steps: int, peak: float) -> float:
    """The learning rate for optimiser step ``step`` (0-based) of ``total_steps``."""
    if recipe.schedule == "constant":
        return peak
    warmup = max(1, int(total_steps * recipe.warmup_fraction))
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * max(0.0, (total_steps - step) / max(1, total_steps - warmup))
