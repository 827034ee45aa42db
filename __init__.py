"""torchdeck: from nothing to distributed PyTorch training, on this machine
(torchrun), on Kubernetes and on AWS EKS, from one terminal console.

Subpackages: ``torchdeck.trainer`` (the training program), ``torchdeck.backends``
(all I/O), ``torchdeck.tui`` (the console and the CLI)."""

__version__ = "0.1.0"
