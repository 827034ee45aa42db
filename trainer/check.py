"""``python -m torchdeck.trainer.check``, under torchrun: the health gate's bandwidth sweep. Every
rank all-reduces float32 tensors from 4 KiB to ``--max-bytes`` (NCCL where there are GPUs, gloo on
CPUs); each size's time is the slowest rank's mean over ``--iters`` runs after ``--warmup``, and
its bandwidths are nccl-tests' (``algbw`` = bytes / time; ``busbw`` = algbw * 2(n-1)/n, what each
link carried). Rank 0 prints the table as the tool's last line (``metrics.tool_line``)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time


def sizes(max_bytes: int) -> list[int]:
    """4 KiB, then each four times the last, up to ``max_bytes``."""
    out, size = [], 4096
    while size <= max_bytes:
        out.append(size)
        size *= 4
    return out or [max_bytes]


def bus_bandwidth(algbw: float, world: int) -> float:
    """What each link carried in a ring all-reduce of ``world`` ranks (nccl-tests' busbw)."""
    return algbw * 2 * (world - 1) / world if world > 1 else algbw


def main(argv: list[str] | None = None) -> int:
    from .metrics import tool_line

    p = argparse.ArgumentParser(prog="python -m torchdeck.trainer.check")
    p.add_argument("--max-bytes", type=int, default=16 << 20)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args(argv)
    import torch
    import torch.distributed as dist

    gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    rows = []
    for size in sizes(args.max_bytes):
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(tensor)
        if gpu:
            torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(tensor)
        if gpu:
            torch.cuda.synchronize()
        took = torch.tensor([(time.perf_counter() - started) / args.iters], dtype=torch.float64, device=device)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)  # the slowest rank's: the collective's own time
        seconds = float(took.item())
        algbw = size / seconds / 1e9
        rows.append({"bytes": size, "time_s": seconds, "algbw_gbps": algbw, "busbw_gbps": bus_bandwidth(algbw, world)})
    hosts: list[str | None] = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    if rank == 0:
        result = {"backend": "nccl" if gpu else "gloo", "world_size": world, "hosts": hosts, "rows": rows}
        print(tool_line("check", result), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
