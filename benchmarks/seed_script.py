"""The seed workshop's training-script design, for the throughput comparison
in time_to_accuracy.py: a TensorDataset of float images scaled to [0, 1],
a DataLoader collating sample by sample, a distributed sampler, the seed CNN,
SGD(lr=1e-3, momentum=0.9, weight_decay=1e-4), ``loss.item()`` every step
with a print every 5, and rank 0 saving a checkpoint every epoch.

Run under torchrun; prints one JSON line per rank per epoch with the time
spent training, so the benchmark can compare images/s with torchdeck's own.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from torchdeck.trainer.data import load_cifar10
from torchdeck.trainer.models import SeedCNN


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--checkpoint-file", required=True)
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    train = load_cifar10(a.data_dir, train=True)
    dataset = TensorDataset(train.images.float() / 255, train.labels)  # as the seed's get_tensordataset
    sampler = DistributedSampler(dataset)  # no set_epoch: one order, as the seed
    loader = DataLoader(dataset, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers)
    torch.manual_seed(0)
    model = DistributedDataParallel(SeedCNN())
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 1e-3, momentum=0.9, weight_decay=1e-4)
    model.train()
    for epoch in range(a.epochs):
        started = time.perf_counter()
        running, images = 0.0, 0
        for i, (inputs, labels) in enumerate(loader):
            optimizer.zero_grad()
            loss = criterion(model(inputs), labels)
            loss.backward()
            optimizer.step()
            running += loss.item()
            images += len(labels)
            if i % 5 == 4:
                print(f"[{epoch + 1}, {i + 1:5d}] loss: {running / 5:.3f}", flush=True)
                running = 0.0
        if rank == 0:
            torch.save(
                {
                    "epoch": epoch,
                    "model_state_dict": model.state_dict(),
                    "optimizer_state_dict": optimizer.state_dict(),
                },
                a.checkpoint_file,
            )
        elapsed = time.perf_counter() - started
        print(
            json.dumps(
                {
                    "event": "epoch",
                    "rank": rank,
                    "epoch": epoch + 1,
                    "images": images,
                    "epoch_s": elapsed,
                    "samples_per_s": images / elapsed,
                }
            ),
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
