"""The training program's options, declared once: each flag of ``python -m torchdeck.trainer`` with
its type, default, choices, lowest value and help. The trainer's argparse is made from this table
(``add_to``), the launchers' command line from it too (``command_line``), and the job spec's
``trainer.*``, ``device``, ``download`` and ``model_file`` fields take their default, choices and
help from it (``backends/spec_options.py:trainer_field``); a test proves the three agree.

Why here and not in the spec: the trainer runs in a pod with torch and numpy alone and knows
nothing of the console (tests/unit/test_layering.py), while the backends may read the trainer's
standard-library modules (they already read ``s3url``). So the declaration lives with the program
that takes the flags, and the spec reads it. Standard library only."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from .recipes import DEFAULT_RECIPE, RECIPES

T = TypeVar("T", covariant=True)
"""An option's value type: covariant, so that the table holds options of every type as
``TrainerOption[object]``."""

DEVICES = ("auto", "cpu", "cuda")
"""Where a rank runs: auto (CUDA where there is a GPU, else the CPU), cpu or cuda."""
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
"""The autocast number format: auto (bf16 where the hardware has it), fp32, bf16 or fp16."""
DATASETS = ("cifar10", "synthetic")
"""cifar10 from the data folder, or generated images of the same shape."""
RECIPE_NAMES = tuple(sorted(RECIPES))
"""The recipes (``recipes.py``), by name."""
MODEL_NAMES = ("resnet-fast", "resnet18", "seed-cnn")
"""The networks of ``models.py`` (which imports torch, so the spec cannot read them from there;
tests/unit/test_spec.py checks they are its names)."""


@dataclass(frozen=True)
class TrainerOption(Generic[T]):
    """One flag of the training program. ``T`` is its value's type as the job spec holds it
    (``int | None`` where None means the recipe's), which the spec's field declares again as its
    annotation: the type checker holds the two together."""

    name: str
    """The argparse dest and the spec field's own name: ``batch_size`` is ``--batch-size``."""
    value_type: type[int] | type[str] | type[bool]
    """int and str are read from the flag's value; bool is a switch (present: True)."""
    default: T
    help: str | None
    """One line: the trainer's --help, and the spec's form, template and reference. None: a test's
    knob, absent from --help and from the spec."""
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    """The lowest value an int takes; the trainer's parser and the spec's check both refuse less."""
    unset: str = ""
    """What None means, for the trainer's --help ("the recipe's")."""
    metavar: str | None = None
    environ: str = ""
    """An environment variable that replaces the default where it is set (the trainer's parser)."""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


DATA_DIR: TrainerOption[str] = TrainerOption(
    "data_dir",
    str,
    "data",
    "folder holding cifar-10-batches-py/",
    unset="$TORCHDECK_DATA_DIR or ./data",
    environ="TORCHDECK_DATA_DIR",
)
DATASET: TrainerOption[str] = TrainerOption("dataset", str, "cifar10", "cifar10, or synthetic images", DATASETS)
RECIPE: TrainerOption[str] = TrainerOption(
    "recipe", str, DEFAULT_RECIPE, "the built-in trainer's hyper-parameters", RECIPE_NAMES
)
CHECKPOINT_DIR: TrainerOption[str | None] = TrainerOption(
    "checkpoint_dir", str, None, "where rank 0 writes snapshots and every rank resumes from"
)
DEVICE: TrainerOption[str] = TrainerOption(
    "device", str, "auto", "auto: CUDA where there is a GPU, else the CPU", DEVICES
)
SEED: TrainerOption[int] = TrainerOption("seed", int, 0, "random seed", minimum=0)
CHECKPOINT_EVERY: TrainerOption[int] = TrainerOption(
    "checkpoint_every", int, 0, "also snapshot every N optimiser steps", minimum=0, metavar="N"
)
KEEP_CHECKPOINTS: TrainerOption[int] = TrainerOption(
    "keep_checkpoints", int, 3, "keep the newest K snapshots", minimum=0, metavar="K"
)
LOG_EVERY: TrainerOption[int] = TrainerOption(
    "log_every", int, 1, "a step metric line every N steps", minimum=1, metavar="N"
)
METRICS_FILE: TrainerOption[str | None] = TrainerOption(
    "metrics_file", str, None, "also append metric lines here; {rank} in the path gives one file per rank"
)
MODEL: TrainerOption[str | None] = TrainerOption(
    "model", str, None, "the built-in trainer's network", MODEL_NAMES, unset="the recipe's"
)
EPOCHS: TrainerOption[int | None] = TrainerOption(
    "epochs", int, None, "epochs to train", minimum=1, unset="the recipe's"
)
BATCH_SIZE: TrainerOption[int | None] = TrainerOption(
    "batch_size", int, None, "images per rank per step", minimum=1, unset="the recipe's"
)
MAX_STEPS: TrainerOption[int | None] = TrainerOption(
    "max_steps", int, None, "stop after N optimiser steps", minimum=1, unset="no limit"
)
PRECISION: TrainerOption[str | None] = TrainerOption(
    "precision", str, None, "number format of the training", PRECISIONS, unset="the recipe's"
)
MODEL_FILE: TrainerOption[str | None] = TrainerOption(
    "model_file",
    str,
    None,
    "where the trained model goes: a path or s3://bucket/key",
    unset="model.pt in --checkpoint-dir, if given",
)
DOWNLOAD: TrainerOption[bool] = TrainerOption("download", bool, False, "fetch CIFAR-10 into the data folder if absent")
SYNTHETIC_SIZE: TrainerOption[int] = TrainerOption("synthetic_size", int, 4096, None, minimum=1)

TRAINER_OPTIONS: tuple[TrainerOption[object], ...] = (
    DATA_DIR,
    DATASET,
    RECIPE,
    CHECKPOINT_DIR,
    DEVICE,
    SEED,
    CHECKPOINT_EVERY,
    KEEP_CHECKPOINTS,
    LOG_EVERY,
    METRICS_FILE,
    MODEL,
    EPOCHS,
    BATCH_SIZE,
    MAX_STEPS,
    PRECISION,
    MODEL_FILE,
    DOWNLOAD,
    SYNTHETIC_SIZE,
)
"""Every option, in the order the launchers have always written them (the golden manifests in
tests/data/golden hold that order)."""


def add_to(parser: argparse.ArgumentParser, opt: TrainerOption[object]) -> None:
    """``opt`` as a flag of ``parser`` (the trainer's, or ``evaluate``'s --device)."""
    if opt.value_type is bool:
        parser.add_argument(opt.flag, action="store_true", help=opt.help)
        return
    default = os.environ.get(opt.environ, opt.default) if opt.environ else opt.default
    help_text = opt.help if opt.help is None or not opt.unset else f"{opt.help} (default: {opt.unset})"
    parser.add_argument(
        opt.flag,
        type=opt.value_type,
        default=default,
        choices=opt.choices or None,
        metavar=opt.metavar,
        help=argparse.SUPPRESS if help_text is None else help_text,
    )


def below_minimum(values: Mapping[str, object]) -> str | None:
    """Why a parsed value is less than its option takes (in the trainer's words), or None."""
    for opt in TRAINER_OPTIONS:
        value = values.get(opt.name)
        if opt.minimum is None or not isinstance(value, int) or value >= opt.minimum:
            continue
        if opt.minimum == 0:
            return f"{opt.flag} must not be negative"
        return f"{opt.flag} must be at least {opt.minimum}, not {value}"
    return None


def one_of(names: tuple[str, ...]) -> str:
    """``a, b or c``: an option's choices in an error's words."""
    return f"{', '.join(names[:-1])} or {names[-1]}"


def command_line(values: Mapping[str, object]) -> list[str]:
    """The trainer's arguments for ``values`` by option name, in the table's order: a value of None
    (the trainer's own default) is left out, a switch is its flag alone where True."""
    unknown = sorted(set(values) - {opt.name for opt in TRAINER_OPTIONS})
    if unknown:
        raise KeyError(f"not an option of the trainer: {', '.join(unknown)}")
    args: list[str] = []
    for opt in TRAINER_OPTIONS:
        value = values.get(opt.name)
        if value is None or value is False:
            continue
        args += [opt.flag] if value is True else [opt.flag, str(value)]
    return args
