"""The networks the trainer can build, by name.

``seed-cnn`` is the seed workshop's network, layer for layer, so that its
numbers can be compared with ours. ``resnet-fast`` (the default) is a small
residual network in the style of the fastest CIFAR-10 recipes (Page's ResNet-9,
Jordan's airbench): a frozen 2x2 patch-whitening stem, three conv-pool-norm
groups with a residual pair, GELU, and a scaled linear head. ``resnet18`` is
torchvision's, offered only where torchvision imports.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

NUM_CLASSES = 10


class SeedCNN(nn.Module):
    """The seed workshop's CNN: six 3x3 convs (32-64-128-128-256-256) with
    max-pool and batch-norm after each pair, a 512-unit hidden layer."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()

        def pair(cin: int, mid: int, cout: int) -> list[nn.Module]:
            return [
                nn.Conv2d(cin, mid, 3, padding=1),
                nn.ReLU(inplace=True),
                nn.Conv2d(mid, cout, 3, padding=1),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
                nn.BatchNorm2d(cout),
            ]

        self.features = nn.Sequential(*pair(3, 32, 64), *pair(64, 128, 128), *pair(128, 256, 256))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(256 * 4 * 4, 512), nn.ReLU(inplace=True), nn.Linear(512, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class ConvGroup(nn.Module):
    """conv -> pool -> BN -> GELU, then a residual conv-BN-GELU pair."""

    def __init__(self, cin: int, cout: int, residual: bool = True):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.pool = nn.MaxPool2d(2)
        self.norm = nn.BatchNorm2d(cout, momentum=0.4)
        self.act = nn.GELU()
        self.residual = (
            nn.Sequential(
                nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                nn.BatchNorm2d(cout, momentum=0.4),
                nn.GELU(),
            )
            if residual
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.norm(self.pool(self.conv(x))))
        if self.residual is not None:
            x = x + self.residual(x)
        return x


class FastResNet(nn.Module):
    """A small residual network built for accuracy per second on CIFAR-10.

    The stem is a 2x2 convolution whose weights are set from the training
    data's patch covariance (``init_whitening``) and then frozen, which makes
    the first epochs learn much faster than a random stem does.
    """

    def __init__(
        self, widths: tuple[int, int, int] = (32, 64, 128), num_classes: int = NUM_CLASSES, stem_width: int = 24
    ):
        super().__init__()
        self.whiten = nn.Conv2d(3, stem_width, 2, padding=0, bias=True)
        self.whiten.weight.requires_grad_(False)
        self.stem_act = nn.GELU()
        self.groups = nn.Sequential(
            ConvGroup(stem_width, widths[0], residual=False),
            ConvGroup(widths[0], widths[1], residual=True),
            ConvGroup(widths[1], widths[2], residual=True),
        )
        self.pool = nn.AdaptiveMaxPool2d(1)
        self.head = nn.Linear(widths[2], num_classes, bias=False)
        self.head_scale = 1 / 9

    def init_whitening(self, images: torch.Tensor, eps: float = 5e-4) -> None:
        """Set the frozen stem to whiten 2x2 patches of ``images`` (N,3,H,W float,
        already normalised): half the filters are the scaled eigenvectors, the
        other half their negatives, so that GELU keeps both signs."""
        c, k = images.shape[1], self.whiten.kernel_size[0]
        patches = images.unfold(2, k, 1).unfold(3, k, 1)
        patches = patches.transpose(1, 3).reshape(-1, c, k, k).float()
        flat = patches.reshape(len(patches), -1)
        flat = flat - flat.mean(0, keepdim=True)
        cov = flat.T @ flat / len(flat)
        eigvals, eigvecs = torch.linalg.eigh(cov)
        eigvals, eigvecs = eigvals.flip(0), eigvecs.T.flip(0)
        half = self.whiten.out_channels // 2
        filters = (eigvecs / torch.sqrt(eigvals + eps)[:, None]).reshape(-1, c, k, k)[:half]
        with torch.no_grad():
            self.whiten.weight.copy_(torch.cat((filters, -filters)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.groups(self.stem_act(self.whiten(x)))
        return self.head(self.pool(x).flatten(1)) * self.head_scale


def _torchvision_resnet18() -> nn.Module:
    try:
        import torchvision  # noqa: F401  (optional; its wheels do not import everywhere)
        from torchvision.models import resnet18
    except Exception as exc:  # torchvision raises more than ImportError when built against another torch
        raise ModelUnavailable(
            f"model 'resnet18' needs torchvision, which does not import here ({exc.__class__.__name__})"
        ) from exc
    net = resnet18(num_classes=NUM_CLASSES)
    # CIFAR images are 32x32: a 3x3 stem without the early max-pool, as is usual.
    net.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    net.maxpool = nn.Identity()
    return net


class ModelUnavailable(RuntimeError):
    """The named model cannot be built on this machine."""


MODELS: dict[str, Callable[[], nn.Module]] = {
    "resnet-fast": FastResNet,
    "seed-cnn": SeedCNN,
    "resnet18": _torchvision_resnet18,
}


def build_model(name: str) -> nn.Module:
    """Build the named model; raises ``ModelUnavailable`` for unknown or unbuildable names."""
    if name not in MODELS:
        raise ModelUnavailable(f"unknown model '{name}' (choose from {', '.join(MODELS)})")
    return MODELS[name]()
