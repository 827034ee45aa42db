"""A hang to triage (issue 44): a DDP script over gloo in which one rank sleeps before its all-reduce
at one step while the others wait in it. The training, kmock and real-cluster tests run it."""

from __future__ import annotations

SLEEP_LINE = 10
"""The script's line of the sleeping rank's ``time.sleep``."""
ALL_REDUCE_LINE = 11
"""And of the all-reduce the other ranks wait in."""


def hang_script(rank: int, step: int, pause: float = 0.05) -> str:
    """Rank ``rank`` sleeps before its all-reduce at ``step``; every step prints its loss."""
    return f"""\
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, 1000):
    t = torch.ones(1000)
    if rank == {rank} and step == {step}:
        time.sleep(3600)  # rank {rank} is elsewhere
    dist.all_reduce(t)
    print(f"step {{step}} loss {{1.0 / step:.4f}}", flush=True)
    time.sleep({pause})
"""
