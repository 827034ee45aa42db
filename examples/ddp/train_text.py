"""A plain DDP script that prints its loss as text, as most scripts do:
torchdeck reads these lines as each rank's curve (nothing to import).

    torchrun --nproc-per-node 2 train_text.py --epochs 3
    torchdeck train examples/ddp/train_text.py -- --epochs 3
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from toy import accuracy, data, model, setup


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
    total = per_epoch * args.epochs
    step = 0
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
            print(f"epoch {epoch}/{args.epochs} step {step}/{total} loss: {loss.item():.4f} {speed:.0f} samples/s")
        acc = accuracy(net, x, y)
        if rank == 0:
            print(f"epoch {epoch}/{args.epochs} accuracy: {acc * 100:.2f}%")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
