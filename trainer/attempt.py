"""Which attempt of the job this process is part of, agreed by every rank through the store.

The ranks of an attempt join one process group through a namespace of the store of their own: the
default group writes its peers' addresses under the same keys every time, so a rank that reads a
dead attempt's keys tries a dead rank's address. The namespace cannot be named after torchrun's
restart count: a pod made again on another node (its node was lost) starts at 0 while the ranks
that waited for it have restarted once, and each side would wait in a namespace the other never
writes. Rank 0 names the attempt instead, by a number the store counts up (``add``), and each
other rank learns it by a handshake no stale key can fake: the rank says hello with a token of its
own, rank 0 answers that token with the number, the rank confirms it; rank 0 goes on once every
rank has confirmed this attempt's number, which no earlier attempt wrote."""

from __future__ import annotations

import time
import uuid
from typing import Protocol

PREFIX = "torchdeck/attempt"
POLL_S = 0.05


class Store(Protocol):
    """What of torch.distributed's Store the handshake uses."""

    def add(self, key: str, amount: int, /) -> int: ...

    def set(self, key: str, value: str, /) -> None: ...

    def get(self, key: str, /) -> bytes: ...

    def check(self, keys: list[str], /) -> bool: ...


class NoAgreement(RuntimeError):
    """A rank did not join this attempt in time (the attempt fails; torchrun starts the next)."""


def _read(store: Store, key: str) -> str | None:
    return store.get(key).decode() if store.check([key]) else None


def agreed(store: Store, rank: int, world_size: int, timeout_s: float = 300.0) -> str:
    """The attempt's name, the same on every rank of it."""
    if world_size <= 1:
        return "solo"
    deadline = time.monotonic() + timeout_s
    if rank == 0:
        number = str(store.add(f"{PREFIX}/count", 1))
        waiting = set(range(1, world_size))
        while waiting:
            for other in sorted(waiting):
                hello = _read(store, f"{PREFIX}/hello/{other}")
                if hello is None:
                    continue
                answer = f"{hello}:{number}"
                if _read(store, f"{PREFIX}/confirm/{other}") == answer:
                    waiting.discard(other)
                else:
                    store.set(f"{PREFIX}/answer/{other}", answer)
            if waiting:
                _wait(deadline, f"rank(s) {_listed(waiting)} did not join attempt {number} in {timeout_s:g} s")
        return number
    token = uuid.uuid4().hex
    store.set(f"{PREFIX}/hello/{rank}", token)
    while True:
        mine = _read(store, f"{PREFIX}/answer/{rank}")
        if mine is not None and mine.startswith(f"{token}:"):
            store.set(f"{PREFIX}/confirm/{rank}", mine)
            return mine.partition(":")[2]
        _wait(deadline, f"rank 0 did not answer rank {rank} in {timeout_s:g} s")


def _wait(deadline: float, why: str) -> None:
    if time.monotonic() > deadline:
        raise NoAgreement(why)
    time.sleep(POLL_S)


def _listed(ranks: set[int]) -> str:
    shown = sorted(ranks)
    return ", ".join(map(str, shown[:8])) + (f" and {len(shown) - 8} more" if len(shown) > 8 else "")
