"""The ``torchdeck`` command. Sub-commands parse their own options and import
what they need only when they run, so that ``torchdeck --help`` stays fast."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from torchdeck import __version__

OVERVIEW = """\
torchdeck trains PyTorch models with DDP on this machine (torchrun), on
Kubernetes and on AWS EKS.

Train on this machine, two ranks, on CIFAR-10 in ./data:
  torchrun --nproc-per-node 2 -m torchdeck.trainer --data-dir data --checkpoint-dir runs/demo
Test the saved model:
  python -m torchdeck.trainer.evaluate --model-file runs/demo/model.pt --data-dir data
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchdeck", description=OVERVIEW, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"torchdeck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("version", help="print the version")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "version":
        print(f"torchdeck {__version__}")
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
