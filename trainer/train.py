"""The distributed training program: ``python -m torchdeck.trainer`` or
``torchrun ... -m torchdeck.trainer``.

It reads its place in the job from torchrun's environment (RANK,
LOCAL_RANK, WORLD_SIZE, TORCHELASTIC_RESTART_COUNT), trains with DDP over
gloo (CPU) or nccl (CUDA), evaluates every epoch, snapshots from rank 0,
resumes from the newest good snapshot, and reports everything as metric lines.

Why one module of this size: it reads as PyTorch's DDP examples do, the ``Trainer`` class with
``run_batch``, ``run_epoch`` and ``save_snapshot`` in one place; data, models, checkpoints and
metrics are modules of their own."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from . import attempt, checkpoint, data
from .check import NODE_NAME_ENV
from .errors import TrainerError
from .hardware import GpuProbe, Placement, choose_placement
from .metrics import MetricsWriter
from .model_file import save_model
from .models import ModelUnavailable, build_model
from .options import TRAINER_OPTIONS, add_to, below_minimum
from .recipes import RECIPES, Recipe, lr_at
from .stopping import PARTIAL_STOP_RECHECK_S, RanksStopped, StopRequest


@dataclass
class TrainConfig:
    """Everything a run needs, after the recipe's defaults are applied."""

    data_dir: str
    dataset: str
    download: bool
    model: str
    recipe: Recipe
    epochs: int
    max_steps: int | None
    batch_size: int
    checkpoint_dir: str | None
    checkpoint_every: int
    keep_checkpoints: int
    model_file: str | None
    device: str
    precision: str
    seed: int
    metrics_file: str | None
    log_every: int
    synthetic_size: int


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job, as torchrun describes it."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    restart_count: int = 0
    nodes: tuple[str, ...] = ()
    """The node (machine) of each rank, by rank, once the ranks have joined (each says its own)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> DistEnv:
        def number(name: str, default: int) -> int:
            raw = environ.get(name, str(default))
            try:
                return int(raw)
            except ValueError:
                raise TrainerError(f"environment variable {name}={raw!r} is not a number") from None

        return cls(
            number("RANK", 0), number("LOCAL_RANK", 0), number("WORLD_SIZE", 1), number("TORCHELASTIC_RESTART_COUNT", 0)
        )


def argument_parser() -> argparse.ArgumentParser:
    """The program's command line, made from its one declaration (``options.py``)."""
    p = argparse.ArgumentParser(
        prog="python -m torchdeck.trainer",
        description="Train an image classifier on CIFAR-10, alone or under torchrun (DDP).",
    )
    for opt in TRAINER_OPTIONS:
        add_to(p, opt)
    return p


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    p = argument_parser()
    a = p.parse_args(argv)
    recipe = RECIPES[a.recipe]
    model = a.model or recipe.model
    problem = below_minimum(vars(a))
    if problem:
        p.error(problem)
    model_file = a.model_file or (str(Path(a.checkpoint_dir) / "model.pt") if a.checkpoint_dir else None)
    return TrainConfig(
        data_dir=a.data_dir,
        dataset=a.dataset,
        download=a.download,
        model=model,
        recipe=recipe,
        epochs=a.epochs or recipe.epochs,
        max_steps=a.max_steps,
        batch_size=a.batch_size or recipe.batch_size,
        checkpoint_dir=a.checkpoint_dir,
        checkpoint_every=a.checkpoint_every,
        keep_checkpoints=a.keep_checkpoints,
        model_file=model_file,
        device=a.device,
        precision=a.precision or recipe.precision,
        seed=a.seed,
        metrics_file=a.metrics_file,
        log_every=a.log_every,
        synthetic_size=a.synthetic_size,
    )


def load_datasets(cfg: TrainConfig) -> tuple[data.ImageSet, data.ImageSet, str]:
    if cfg.dataset == "synthetic":
        return (
            data.synthetic_cifar10(cfg.synthetic_size, seed=1),
            data.synthetic_cifar10(max(256, cfg.synthetic_size // 5), seed=2),
            "synthetic",
        )
    if cfg.download:
        data.download_cifar10(cfg.data_dir)
    return data.load_cifar10(cfg.data_dir, train=True), data.load_cifar10(cfg.data_dir, train=False), "cifar10"


class Trainer:
    """One rank's training loop, in the shape of the PyTorch DDP examples:
    ``run_batch``, ``run_epoch``, ``evaluate``, ``save_snapshot``, ``train``."""

    def __init__(
        self,
        cfg: TrainConfig,
        env: DistEnv,
        placement: Placement,
        train_set: data.ImageSet,
        test_set: data.ImageSet,
        dataset_name: str,
        job_started_at: float,
        stop: StopRequest | None = None,
    ):
        self.cfg, self.env, self.placement = cfg, env, placement
        self.stop = stop or StopRequest()
        """A stop asked from outside (SIGTERM): honoured at the next step every rank reports."""
        self.stopped = False
        self.stop_whole = True
        """Whether every rank was asked to stop (the run stopped), not some (a pod deleted or evicted)."""
        self.ranks_asked = 0
        self.recipe = cfg.recipe
        self.device = placement.device
        self.train_set, self.test_set, self.dataset_name = train_set, test_set, dataset_name
        self.ckpt_dir = Path(cfg.checkpoint_dir).expanduser() if cfg.checkpoint_dir else None
        self.metrics = MetricsWriter(
            env.rank, env.local_rank, env.world_size, job_started_at, cfg.metrics_file, restart_count=env.restart_count
        )
        self.gpu = GpuProbe(self.device)
        self.global_batch = cfg.batch_size * env.world_size
        self.sampler = data.ShardedSampler(len(train_set), env.rank, env.world_size, seed=cfg.seed)
        self.steps_per_epoch = math.ceil(self.sampler.per_rank / cfg.batch_size)
        self.total_steps = self.steps_per_epoch * cfg.epochs
        if cfg.max_steps:
            self.total_steps = min(self.total_steps, cfg.max_steps)
        self.peak_lr = self.recipe.peak_lr(self.global_batch)

        torch.manual_seed(cfg.seed)
        try:
            model = build_model(cfg.model)
        except ModelUnavailable as exc:
            raise TrainerError(str(exc)) from exc
        if self.recipe.channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # Module.to takes it
        self.model = model.to(self.device)
        self.compute = ComputeClock(self.model, self.device)
        mean, std = data.normalisation(self.recipe.standardise)
        self.pipeline = data.BatchPipeline(
            train_set,
            augment=self.recipe.augment,
            seed=cfg.seed,
            rank=env.rank,
            channels_last=self.recipe.channels_last,
            device=self.device,
            mean=mean,
            std=std,
        )
        self.test_pipeline = data.BatchPipeline(
            test_set, augment=False, channels_last=self.recipe.channels_last, device=self.device, mean=mean, std=std
        )
        self.optimizer = self._make_optimizer()
        self.scaler = torch.amp.GradScaler("cuda", enabled=placement.amp_dtype == torch.float16)
        self.step = 0  # optimiser steps completed, job-wide
        self.best_accuracy = 0.0
        self.last_accuracy: float | None = None
        self.ddp: nn.Module = self.model

    @property
    def epochs_done(self) -> int:
        return self.step // self.steps_per_epoch

    def _make_optimizer(self) -> torch.optim.Optimizer:
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.recipe.decay_norm_and_bias:
            groups = [{"params": params, "weight_decay": self.recipe.weight_decay}]
        else:
            groups = [
                {"params": [p for p in params if p.ndim > 1], "weight_decay": self.recipe.weight_decay},
                {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0},
            ]
        return torch.optim.SGD(groups, lr=self.peak_lr, momentum=self.recipe.momentum, nesterov=self.recipe.nesterov)

    # -- state ---------------------------------------------------------------------------------

    def state(self) -> dict[str, object]:
        return {
            "model": self.model.state_dict(),
            "model_name": self.cfg.model,
            "recipe": self.recipe.name,
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "epoch": self.epochs_done,
            "step": self.step,
            "steps_per_epoch": self.steps_per_epoch,
            "world_size": self.env.world_size,
            "best_accuracy": self.best_accuracy,
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state(self.device)
            if self.device.type == "cuda"
            else torch.empty(0, dtype=torch.uint8),
        }

    def resume(self) -> None:
        """Load the newest good snapshot, if any; report it with a resume line."""
        if self.ckpt_dir is None:
            return
        loaded = checkpoint.load_newest(self.ckpt_dir)
        for path, why in loaded.skipped:
            print(
                f"torchdeck.trainer: warning: skipping unreadable checkpoint {path.name}: {why}",
                file=sys.stderr,
                flush=True,
            )
        if loaded.state is None:
            if loaded.skipped:
                print(
                    "torchdeck.trainer: warning: no checkpoint loads; starting from scratch",
                    file=sys.stderr,
                    flush=True,
                )
            return
        state = loaded.state
        if state["model_name"] != self.cfg.model:
            raise TrainerError(
                f"checkpoint {loaded.path} was written by model '{state['model_name']}', not '{self.cfg.model}'",
                hint="use another --checkpoint-dir, or the same --model as before",
            )
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise TrainerError(
                f"checkpoint {loaded.path} does not fit this job: {str(exc).splitlines()[0][:160]}",
                hint="use another --checkpoint-dir",
            ) from exc
        if "scaler" in state and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        saved = self.step = int(state["step"])
        self.best_accuracy = float(state.get("best_accuracy", 0.0))
        if state.get("steps_per_epoch") not in (None, self.steps_per_epoch):
            self.step = self.step_in_this_world(state)
        if "rng_cpu" in state:
            torch.set_rng_state(state["rng_cpu"])
        if self.device.type == "cuda" and state.get("rng_cuda") is not None and state["rng_cuda"].numel():
            torch.cuda.set_rng_state(state["rng_cuda"], self.device)
        self.metrics.emit(
            "resume",
            epoch=self.epoch_of(self.step),
            step=self.step,
            path=str(loaded.path),
            restart_count=self.env.restart_count,
            skipped=[p.name for p, _ in loaded.skipped],
            **({"saved_step": saved, "saved_world_size": state.get("world_size")} if self.step != saved else {}),
        )

    def step_in_this_world(self, state: Mapping[str, object]) -> int:
        """The step a snapshot taken with another world size stands for here (an elastic run gone on
        with fewer nodes, or grown back): the samples its epoch had taken, in this world's batches.
        The ranks take a permutation's indices in turn, so the samples a world of W ranks had
        taken after K batches each are the permutation's first W*K: where this world's batches
        divide them, none is taken twice and none is skipped. A snapshot that does not say its world
        size starts its epoch again."""
        epoch, old_world = int(str(state["epoch"])), state.get("world_size")
        start = epoch * self.steps_per_epoch
        if not isinstance(old_world, int) or old_world < 1 or not isinstance(state.get("steps_per_epoch"), int):
            return start
        batches = (int(str(state["step"])) - epoch * int(str(state["steps_per_epoch"]))) * old_world
        return start + min(batches // self.env.world_size, self.steps_per_epoch)

    def epoch_of(self, step: int) -> int:
        """The 1-based epoch that optimiser step ``step`` belongs to, as in step lines."""
        return max(1, -(-step // self.steps_per_epoch))

    def save_snapshot(self) -> None:
        """Rank 0 writes a snapshot atomically; the others only wait for it."""
        if self.ckpt_dir is None:
            return
        if self.env.rank == 0:
            started = time.perf_counter()
            path, size = checkpoint.save(self.ckpt_dir, self.step, self.state(), self.cfg.keep_checkpoints)
            self.metrics.emit(
                "checkpoint",
                epoch=self.epoch_of(self.step),
                step=self.step,
                path=str(path),
                bytes=size,
                save_s=round(time.perf_counter() - started, 4),
            )

    # -- training ------------------------------------------------------------------------------

    def _autocast(self) -> torch.autocast:
        return torch.autocast(
            self.device.type,
            dtype=self.placement.amp_dtype or torch.float32,
            enabled=self.placement.amp_dtype is not None,
        )

    def run_batch(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        lr = lr_at(self.recipe, self.step, self.total_steps, self.peak_lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with self._autocast():
            logits = self.ddp(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=self.recipe.label_smoothing)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.step += 1
        return loss.detach()

    def run_epoch(self, epoch: int) -> bool:
        """Train epoch ``epoch`` (0-based) from wherever the job stands in it.
        Returns False when --max-steps stopped it early."""
        self.sampler.set_epoch(epoch if self.recipe.reshuffle else 0)
        indices = self.sampler.indices()
        skip = self.step - epoch * self.steps_per_epoch  # batches done before a restart mid-epoch
        bs = self.cfg.batch_size
        losses: list[torch.Tensor] = []
        images = 0
        started = time.perf_counter()
        for i in range(skip, self.steps_per_epoch):
            if self.step >= self.total_steps:
                return False
            t0 = time.perf_counter()
            x, y = self.pipeline.batch(indices[i * bs : (i + 1) * bs], epoch, i)
            t1 = time.perf_counter()
            loss = self.run_batch(x, y)
            losses.append(loss)
            images += len(y)
            if self.step % self.cfg.log_every == 0 or self.step == self.total_steps:
                value = loss.item()  # synchronises with the device: only on lines we write
                step_s = time.perf_counter() - t0
                self.metrics.emit(
                    "step",
                    epoch=epoch + 1,
                    step=self.step,
                    loss=round(value, 5),
                    lr=round(self.optimizer.param_groups[0]["lr"], 6),
                    samples_per_s=round(len(y) / step_s, 2),
                    step_s=round(step_s, 5),
                    data_s=round(t1 - t0, 5),
                    **({"compute_s": round(c, 5)} if (c := self.compute.seconds()) is not None else {}),
                    **self.gpu.sample(),
                )
                if self.stop_agreed():
                    self.stopped = True
                    return False
            if (
                self.ckpt_dir is not None
                and self.cfg.checkpoint_every
                and self.step % self.cfg.checkpoint_every == 0
                and i + 1 < self.steps_per_epoch
            ):
                self.save_snapshot()
        epoch_s = time.perf_counter() - started
        mean_loss = torch.stack(losses).mean().item() if losses else float("nan")
        self.metrics.emit(
            "epoch",
            epoch=epoch + 1,
            step=self.step,
            loss=round(mean_loss, 5),
            samples_per_s=round(images / epoch_s, 2) if epoch_s > 0 else None,
            epoch_s=round(epoch_s, 3),
        )
        return True

    def stop_agreed(self) -> bool:
        """Whether any rank has been asked to stop, agreed by all at a step they all reach (a step
        they report): each then stops after the same step, and none waits in a collective for a
        rank that has left. Where only some ranks were asked (``stop_whole`` False after): one pod
        deleted or evicted, not the run stopped; the others learn it here and leave for a restart."""
        asked = self._ranks_asked()
        if 0 < asked < self.env.world_size:
            # the signal of a whole stop reaches each rank a moment apart: look again once
            time.sleep(PARTIAL_STOP_RECHECK_S)
            asked = self._ranks_asked()
        self.stop_whole = asked >= self.env.world_size
        self.ranks_asked = int(asked)
        return asked > 0

    def _ranks_asked(self) -> int:
        """How many ranks have been asked to stop (every rank calls it at the same step)."""
        asked = 1.0 if self.stop.asked else 0.0
        if self.env.world_size > 1 and dist.is_initialized():
            flag = torch.tensor([asked], device=self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.SUM)
            asked = flag.item()
        return round(asked)

    def evaluate(self) -> tuple[float, float, list[float]]:
        """Accuracy, mean loss and per-class accuracy on the test set; each
        rank takes a disjoint part and the counts are summed."""
        return evaluate_model(
            self.model,
            self.test_pipeline,
            self.env,
            num_classes=len(self.test_set.classes),
            tta=self.recipe.tta,
            autocast=self._autocast,
        )

    def train(self) -> dict[str, object]:
        self.resume()
        if self.step == 0 and hasattr(self.model, "init_whitening"):
            sample = self.train_set.images[: min(len(self.train_set), 5000)]
            self.model.init_whitening(self.pipeline.normalise(sample))  # type: ignore[operator]  # hasattr above
        if self.env.world_size > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(self.model, device_ids=ids)
        params = sum(p.numel() for p in self.model.parameters())
        self.metrics.emit(
            "start",
            model=self.cfg.model,
            recipe=self.recipe.name,
            dataset=self.dataset_name,
            device=str(self.device),
            backend=self.placement.backend if self.env.world_size > 1 else None,
            precision=self.placement.precision,
            global_batch=self.global_batch,
            epochs=self.cfg.epochs,
            steps_per_epoch=self.steps_per_epoch,
            total_steps=self.total_steps,
            train_size=len(self.train_set),
            test_size=len(self.test_set),
            params=params,
            restart_count=self.env.restart_count,
            start_step=self.step,
            **({"nodes": list(self.env.nodes)} if self.env.nodes else {}),
        )
        train_started = time.perf_counter()
        while self.step < self.total_steps:
            epoch = self.step // self.steps_per_epoch
            finished = self.run_epoch(epoch)
            if self.stopped:  # asked to stop: the snapshot now, then leave (a resume continues here)
                self.save_snapshot()
                summary: dict[str, object] = {"epoch": self.epoch_of(self.step), "step": self.step}
                if not self.stop_whole:  # some ranks' pods went: every rank leaves for the next attempt
                    self.metrics.emit("restarting", **summary, ranks_stopped=self.ranks_asked)
                    raise RanksStopped(self.ranks_asked, self.step)
                summary["signal"] = self.stop.signal_name or "SIGTERM"
                self.metrics.emit("stopped", **summary, train_s=round(time.perf_counter() - train_started, 3))
                return {**summary, "stopped": True}
            accuracy, loss, per_class = self.evaluate()
            self.last_accuracy = accuracy
            self.best_accuracy = max(self.best_accuracy, accuracy)
            self.metrics.emit(
                "eval",
                epoch=epoch + 1,
                step=self.step,
                accuracy=round(accuracy, 5),
                loss=round(loss, 5),
                per_class=[round(a, 4) for a in per_class],
            )
            self.save_snapshot()
            if not finished:
                break
        if self.last_accuracy is None:  # resumed a finished job: report what it is
            self.last_accuracy, _, _ = self.evaluate()
        model_file = self.cfg.model_file
        if self.env.rank == 0 and model_file:
            save_model(
                model_file,
                {
                    "model": self.cfg.model,
                    "state_dict": self.model.state_dict(),
                    "classes": list(self.test_set.classes),
                    "standardise": self.recipe.standardise,
                    "tta": self.recipe.tta,
                    "accuracy": self.last_accuracy,
                    "epochs": self.epochs_done,
                    "steps": self.step,
                },
            )
        summary = {
            "epoch": self.epochs_done,
            "step": self.step,
            "accuracy": round(self.last_accuracy, 5),
            "best_accuracy": round(self.best_accuracy, 5),
            "model_file": model_file if self.env.rank == 0 else None,
            "train_s": round(time.perf_counter() - train_started, 3),
        }
        self.metrics.emit("done", **summary)
        return summary


def evaluate_model(
    model: nn.Module,
    pipeline: data.BatchPipeline,
    env: DistEnv,
    num_classes: int,
    tta: bool,
    autocast: Callable[[], AbstractContextManager[object]],
    batch_size: int = 500,
) -> tuple[float, float, list[float]]:
    """Accuracy, mean cross-entropy and per-class accuracy of ``model`` on the
    pipeline's images, split over ranks by stride and summed with all_reduce."""
    was_training = model.training
    model.eval()
    n = len(pipeline.data)
    mine = torch.arange(env.rank, n, env.world_size)
    device = pipeline.device
    correct = torch.zeros(num_classes, dtype=torch.float64, device=device)
    total = torch.zeros(num_classes, dtype=torch.float64, device=device)
    loss_sum = torch.zeros(1, dtype=torch.float64, device=device)
    with torch.no_grad():
        for start in range(0, len(mine), batch_size):
            idx = mine[start : start + batch_size]
            x, y = pipeline.batch(idx, epoch=0, step=0)
            with autocast():
                logits = model(x).float()
                if tta:
                    logits = (logits + model(x.flip(3)).float()) / 2
            loss_sum += F.cross_entropy(logits, y, reduction="sum").double()
            hit = (logits.argmax(1) == y).double()
            correct.index_add_(0, y, hit)
            total.index_add_(0, y, torch.ones_like(hit))
    if env.world_size > 1 and dist.is_initialized():
        packed = torch.cat((correct, total, loss_sum))
        dist.all_reduce(packed)
        correct, total, loss_sum = packed[:num_classes], packed[num_classes : 2 * num_classes], packed[-1:]
    model.train(was_training)
    count = total.sum().item()
    per_class = (correct / total.clamp(min=1)).tolist()
    return (
        (correct.sum().item() / count if count else 0.0),
        (loss_sum.item() / count if count else float("nan")),
        per_class,
    )


def _agree_on_start(env: DistEnv, ckpt_dir: Path | None, placement: Placement) -> tuple[float, int]:
    """Rank 0 decides when the job first started (TORCHDECK_JOB_STARTED_AT set
    by a launcher, else job.json in the checkpoint folder, else now) and which attempt of the run
    this is (counted in the checkpoint folder: ``checkpoint.next_attempt``; 0 where there is none, or
    no run of torchdeck's: the trainer run by hand twice is two runs, not two attempts),
    and the other ranks take its word, so every rank's elapsed_s and attempt agree."""
    started, number = time.time(), 0
    if env.rank == 0:
        try:
            started = float(os.environ["TORCHDECK_JOB_STARTED_AT"])
        except (KeyError, ValueError):
            started = checkpoint.job_start_time(ckpt_dir)
        run_id = os.environ.get("TORCHDECK_RUN_ID")  # a run torchdeck launched: its attempts are counted
        number = (checkpoint.next_attempt(ckpt_dir, run_id) or 0) if run_id else 0
    if env.world_size > 1:
        value = torch.tensor([started, number], dtype=torch.float64, device=placement.device)
        dist.broadcast(value, src=0)
        started, number = value[0].item(), round(value[1].item())
    return started, number


class ComputeClock:
    """The seconds of the model's own forward pass, the newest one (``seconds``): hooks on the model
    inside DDP, so the buffers' broadcast DDP starts its forward with (a collective, where a fast rank
    waits for a slow one) is not in it. What tells a rank on a slow node from the ranks that wait for
    it in the all-reduce: their steps take the same time. On CUDA, events on the stream (read once,
    on a line the trainer writes, where it synchronises anyway)."""

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.began = self.ended = 0.0
        self.events: tuple[torch.cuda.Event, torch.cuda.Event] | None = (
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if self.cuda else None
        )
        model.register_forward_pre_hook(lambda module, args: self._mark(0))
        model.register_forward_hook(lambda module, args, out: self._mark(1))

    def _mark(self, end: int) -> None:
        if self.events is not None:
            self.events[end].record()
        elif end:
            self.ended = time.perf_counter()
        else:
            self.began = time.perf_counter()

    def seconds(self) -> float | None:
        """The newest forward pass's seconds (None before the first)."""
        if self.events is not None:
            try:
                self.events[1].synchronize()
                return self.events[0].elapsed_time(self.events[1]) / 1000.0
            except RuntimeError:  # an event not recorded yet
                return None
        return self.ended - self.began if self.ended > self.began else None


def join_process_group(backend: str, env: DistEnv) -> attempt.Attempt:
    """Join the job's process group through a store namespace of this attempt's own, named by rank 0
    and agreed by every rank (``attempt.agreed``): not torchrun's restart count, which a pod made
    again on another node starts over."""
    store, rank, world_size = next(dist.rendezvous("env://"))
    joined = attempt.agreed(store, rank, world_size)
    group_store = dist.PrefixStore(f"torchdeck/attempt{joined.name}/world{world_size}", store)
    dist.init_process_group(backend, store=group_store, rank=rank, world_size=world_size)
    if world_size > 1:
        global _WATCH
        _WATCH = attempt.Watch(joined, rank, _watch_store).start()
    return joined


def _my_node() -> str:
    """This rank's node: a pod's node as the downward API says it, else the host's name."""
    import socket

    return os.environ.get(NODE_NAME_ENV) or socket.gethostname()


def _ranks_nodes(env: DistEnv) -> tuple[str, ...]:
    """Each rank's node, by rank: an attempt's start says where every rank is, so a rank made again
    elsewhere shows as moved."""
    every: list[object] = [None] * env.world_size
    dist.all_gather_object(every, _my_node())
    return tuple(str(n) for n in every)


_WATCH: attempt.Watch | None = None
"""This process's watch over its attempt (a rank made again, a silent store: it leaves)."""


def _watch_store() -> attempt.Store:
    """A connection of the watch's own to the job's store, which gives up in 30 s."""
    from datetime import timedelta

    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    return dist.TCPStore(address, port, is_master=False, timeout=timedelta(seconds=30))


def run(cfg: TrainConfig, env: DistEnv) -> dict[str, object]:
    """Validate, join the process group, train, and leave the group."""
    placement = choose_placement(cfg.device, cfg.precision, env.local_rank)
    ckpt_dir = checkpoint.prepare_dir(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
    train_set, test_set, name = load_datasets(cfg)
    if env.world_size > 1 and not dist.is_initialized():
        joined = join_process_group(placement.backend, env)
        # the restarts: torchrun's count, or the attempts the ranks agreed on where more (a pod made
        # again on another node starts torchrun's count over; a rank joining is no failure to it)
        env = replace(env, restart_count=max(env.restart_count, joined.restarts), nodes=_ranks_nodes(env))
    else:
        env = replace(env, nodes=(_my_node(),))
    try:
        started, number = _agree_on_start(env, ckpt_dir, placement)
        # and the attempts the checkpoint folder counted (an elastic run's node joining again, a pod
        # made again whose store and torchrun both started over)
        env = replace(env, restart_count=max(env.restart_count, number - 1))
        stop = StopRequest()
        stop.install()
        trainer = Trainer(cfg, env, placement, train_set, test_set, name, started, stop)
        summary = trainer.train()
        if dist.is_initialized():
            # No rank leaves while another still uses the group (rank 0 saving the model).
            dist.barrier()
        return summary
    finally:
        if _WATCH is not None:
            _WATCH.stop()
        if dist.is_initialized():
            dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    from .triage_probe import start as start_triage_probe

    start_triage_probe()  # where the run names a triage folder: says where this rank is when asked
    cfg = parse_args(argv)
    env = DistEnv()
    try:
        env = DistEnv.from_environ()
        run(cfg, env)
        return 0
    except TrainerError as exc:
        MetricsWriter(env.rank, env.local_rank, env.world_size, metrics_file=cfg.metrics_file).emit(
            "error", message=exc.message, hint=exc.hint
        )
        print(f"torchdeck.trainer: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except RanksStopped as exc:
        print(f"torchdeck.trainer: {exc}", file=sys.stderr, flush=True)
        return attempt.LEAVE_EXIT
    except KeyboardInterrupt:
        print("torchdeck.trainer: interrupted", file=sys.stderr, flush=True)
        return 130
