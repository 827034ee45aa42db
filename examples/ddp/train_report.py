"""The same DDP script, reporting through torchdeck's helper
(``torchdeck.report``: standard library only, one JSON line per call), so
torchdeck knows the run's length, each step's loss and speed, and the
accuracy without reading text.

    torchdeck train examples/ddp/train_report.py -- --epochs 3

Locally torchdeck makes the helper importable for the script; a training
image needs torchdeck installed (torchdeck's own image has it) or report.py
copied beside the script.
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from toy import accuracy, data, model, setup

from torchdeck import report


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()
    rank, world, device = setup()
    x, y = data(rank, world)
    x, y = x.to(device), y.to(device)
    net = DDP(model().to(device))
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    per_epoch = len(x) // args.batch_size
    report.start(epochs=args.epochs, total_steps=per_epoch * args.epochs, model="toy-mlp")
    step, acc = 0, 0.0
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
        for i in range(per_epoch):
            start = time.perf_counter()
            batch = order[i * args.batch_size : (i + 1) * args.batch_size]
            loss = torch.nn.functional.cross_entropy(net(x[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            speed = args.batch_size / (time.perf_counter() - start)
            report.step(loss=loss, step=step, epoch=epoch, samples_per_s=speed, lr=args.lr)
        acc = accuracy(net, x, y)
        report.eval(accuracy=acc, epoch=epoch)
    report.done(accuracy=acc)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
