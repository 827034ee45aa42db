"""``python -m torchdeck.trainer.evaluate``: test a saved model on the
CIFAR-10 test batch and print overall and per-class accuracy, as the seed
workshop's test job does, or as JSON."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from typing import TypedDict

import torch

from . import data
from .errors import TrainerError
from .hardware import choose_placement
from .metrics import tool_line
from .model_file import describe_mismatch, load_model_file
from .models import MODELS, ModelUnavailable, build_model
from .options import DEVICE, add_to
from .train import DistEnv, evaluate_model


class ClassAccuracy(TypedDict):
    """One class's share of right answers, and how many test images it has."""

    accuracy: float
    images: int


class Evaluation(TypedDict):
    """What ``evaluate_file`` found: the JSON line of ``--output json`` (``tool_line``)."""

    model: str
    model_file: str
    images: int
    accuracy: float
    loss: float
    per_class: dict[str, ClassAccuracy]


# The seed workshop's short class names, used in its printed report.
SHORT_NAMES = ("plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def evaluate_file(
    model_file: str, data_dir: str, model_name: str | None = None, device: str = "auto", batch_size: int = 500
) -> Evaluation:
    """Accuracy of the model in ``model_file`` on the test batch in ``data_dir``."""
    saved = load_model_file(model_file)
    recorded = saved.get("model")
    if model_name and recorded and model_name != recorded:
        raise TrainerError(
            f"{model_file} holds a '{recorded}' model, not '{model_name}'",
            hint=f"drop --model, or pass --model {recorded}",
        )
    name = model_name or recorded
    if not name:
        raise TrainerError(
            f"{model_file} does not say which network it holds",
            hint=f"pass --model (one of {', '.join(sorted(MODELS))})",
        )
    try:
        model = build_model(name)
    except ModelUnavailable as exc:
        raise TrainerError(str(exc)) from exc
    try:
        model.load_state_dict(saved["state_dict"])
    except RuntimeError as exc:
        raise describe_mismatch(name, exc) from exc
    test_set = data.load_cifar10(data_dir, train=False)
    placement = choose_placement(device, "fp32", 0)
    model = model.to(placement.device)
    mean, std = data.normalisation(saved.get("standardise", True))
    pipeline = data.BatchPipeline(test_set, augment=False, device=placement.device, mean=mean, std=std)
    accuracy, loss, per_class = evaluate_model(
        model,
        pipeline,
        DistEnv(),
        num_classes=len(test_set.classes),
        tta=bool(saved.get("tta", False)),
        autocast=nullcontext,
        batch_size=batch_size,
    )
    counts = torch.bincount(test_set.labels, minlength=len(test_set.classes)).tolist()
    return {
        "model": name,
        "model_file": model_file,
        "images": len(test_set),
        "accuracy": accuracy,
        "loss": loss,
        "per_class": {cls: {"accuracy": acc, "images": n} for cls, acc, n in zip(test_set.classes, per_class, counts)},
    }


def format_report(result: Evaluation) -> str:
    """The seed workshop's test-job report."""
    lines = [f"Accuracy of the network on the {result['images']} test images: {100 * result['accuracy']:.1f} %"]
    for i, (cls, row) in enumerate(result["per_class"].items()):
        short = SHORT_NAMES[i] if len(result["per_class"]) == len(SHORT_NAMES) else cls
        lines.append(f"Accuracy for class: {short:5s} is {100 * row['accuracy']:.1f} %")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m torchdeck.trainer.evaluate", description="Test a trained model on the CIFAR-10 test batch."
    )
    p.add_argument("--model-file", required=True, help="the trainer's model file: a path or s3://bucket/key")
    p.add_argument("--data-dir", default="data", help="folder holding cifar-10-batches-py/")
    p.add_argument("--model", choices=sorted(MODELS), help="network, for a bare state dict without its name")
    add_to(p, DEVICE)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--output", choices=("text", "json"), default="text")
    a = p.parse_args(argv)
    try:
        result = evaluate_file(a.model_file, a.data_dir, a.model, a.device, a.batch_size)
    except TrainerError as exc:
        print(f"torchdeck.trainer.evaluate: error: {exc}", file=sys.stderr)
        if a.output == "json":
            print(tool_line("evaluate", error=exc))
        return 2
    print(tool_line("evaluate", result) if a.output == "json" else format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
