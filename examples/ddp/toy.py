"""What both examples train: a small classifier on a synthetic task (points
in 32 dimensions, 10 classes, separable), so they run anywhere in seconds,
on CPUs over gloo or GPUs over NCCL, with torch alone."""

import argparse
import os
import sys
import time
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn


def setup() -> tuple[int, int, torch.device]:
    """Join the job torchrun started: (rank, world size, device)."""
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    return dist.get_rank(), dist.get_world_size(), torch.device(f"cuda:{local}" if cuda else "cpu")


def data(rank: int, world: int, n: int = 8192, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of the data set (every rank makes the same set, then takes its slice)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(10, 32, generator=g) * 0.5
    y = torch.randint(0, 10, (n,), generator=g)
    x = centres[y] + torch.randn(n, 32, generator=g)
    return x[rank::world], y[rank::world]


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The fraction right over every rank's share."""
    with torch.no_grad():
        right = (net(x).argmax(1) == y).sum().float()
    counts = torch.stack([right, torch.tensor(float(len(y)), device=right.device)])
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def prepare() -> tuple[argparse.Namespace, int, nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    """The examples' arguments, this rank's data, the DDP model and its optimiser."""
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()
    rank, world, device = setup()
    x, y = data(rank, world)
    net = nn.parallel.DistributedDataParallel(model().to(device))
    return args, rank, net, torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9), x.to(device), y.to(device)


def batches(n: int, epoch: int, batch_size: int) -> Iterator[torch.Tensor]:
    """One epoch's batches of indices, shuffled the same way on every rank."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch))
    for i in range(n // batch_size):
        yield order[i * batch_size : (i + 1) * batch_size]


def train_step(net: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """One optimiser step on a batch: (its loss, samples per second)."""
    start = time.perf_counter()
    loss = nn.functional.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item(), len(x) / (time.perf_counter() - start)


def finish() -> None:
    """Leave the job: wait for every rank, leave the group, and exit at once. PyTorch's gloo
    threads outlive ``destroy_process_group`` under DDP, and a normal interpreter exit now and
    then aborts among them (``terminate called without an active exception``, exit code 134)
    after the work is done: torchrun then fails the run, or restarts it. Output is flushed
    first and nothing else is open, so skipping that teardown loses nothing."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
