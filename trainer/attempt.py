"""Which attempt of the job this process is part of, agreed by every rank through the store.

The ranks of an attempt join one process group through a namespace of the store of their own: the
default group writes its peers' addresses under the same keys every time, so a rank that reads a
dead attempt's keys tries a dead rank's address. The namespace cannot be named after torchrun's
restart count: a pod made again on another node (its node was lost) starts at 0 while the ranks
that waited for it have restarted once, and each side would wait in a namespace the other never
writes. Rank 0 names the attempt instead, by a number the store counts up (``add``), and each
other rank learns it by a handshake no stale key can fake: the rank says hello with a token of its
own, rank 0 answers that token with the number, the rank confirms it; rank 0 goes on once every
rank has confirmed this attempt's number, which no earlier attempt wrote.

A rank made again also counts its hello in the store (``hellos``). The ranks of the attempt it
replaces may be stuck in a collective with a peer that is frozen or cut off (no connection reset
tells them; gloo would wait half an hour): each watches that count (``Watch``) and leaves, so that
torchrun starts the next attempt, once it grows past what their own attempt began with, or once the
store has not answered for a minute and a half (the node that holds it is lost)."""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

PREFIX = "torchdeck/attempt"
HELLOS = f"{PREFIX}/hellos"
POLL_S = 0.05
WATCH_EVERY_S = 5.0
STORE_SILENT_S = 90.0
LEAVE_EXIT = 75
"""The exit status of a rank that leaves a lost attempt (torchrun restarts on any failure)."""


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


@dataclass(frozen=True)
class Attempt:
    name: str
    hellos: int
    """The ranks' hellos the store had counted when every rank of this attempt had said its own."""

    @property
    def restarts(self) -> int:
        """The attempts before this one (the store counts them from 1)."""
        return int(self.name) - 1 if self.name.isdigit() else 0


def agreed(store: Store, rank: int, world_size: int, timeout_s: float = 300.0) -> Attempt:
    """The attempt, the same on every rank of it."""
    if world_size <= 1:
        return Attempt("solo", 0)
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
        hellos = store.add(HELLOS, 0)
        store.set(f"{PREFIX}/{number}/hellos", str(hellos))
        return Attempt(number, hellos)
    token = uuid.uuid4().hex
    store.set(f"{PREFIX}/hello/{rank}", token)
    store.add(HELLOS, 1)
    while True:
        mine = _read(store, f"{PREFIX}/answer/{rank}")
        if mine is not None and mine.startswith(f"{token}:"):
            store.set(f"{PREFIX}/confirm/{rank}", mine)
            number = mine.partition(":")[2]
            break
        _wait(deadline, f"rank 0 did not answer rank {rank} in {timeout_s:g} s")
    while (counted := _read(store, f"{PREFIX}/{number}/hellos")) is None:
        _wait(deadline, f"rank 0 did not open attempt {number} in {timeout_s:g} s")
    return Attempt(number, int(counted))


def _wait(deadline: float, why: str) -> None:
    if time.monotonic() > deadline:
        raise NoAgreement(why)
    time.sleep(POLL_S)


def _listed(ranks: set[int]) -> str:
    shown = sorted(ranks)
    return ", ".join(map(str, shown[:8])) + (f" and {len(shown) - 8} more" if len(shown) > 8 else "")


class Watch:
    """A rank's watch over its attempt, on a thread of its own with a store connection of its own
    (``connect``: one that gives up within seconds, not the minutes the training's own waits). It
    calls ``leave`` with why once a rank was made again or the store went silent; by default that
    ends the process (the main thread may be stuck in a collective nothing else will end)."""

    def __init__(self, attempt: Attempt, rank: int, connect: Callable[[], Store],
                 leave: Callable[[str], None] | None = None) -> None:  # fmt: skip
        self.attempt, self.rank, self.connect = attempt, rank, connect
        self.leave = leave or _leave
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="torchdeck-attempt-watch", daemon=True)

    def start(self) -> Watch:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        silent_since: float | None = None
        store: Store | None = None
        while not self.stopped.wait(WATCH_EVERY_S):
            try:
                store = store or self.connect()
                count = store.add(HELLOS, 0)
            except Exception as error:  # noqa: BLE001 (any failure to reach the store is silence)
                store = None
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since >= STORE_SILENT_S:
                    self.leave(f"the job's store has not answered for {STORE_SILENT_S:g} s ({error}): "
                               "the node that holds it is likely lost")  # fmt: skip
                    return
                continue
            silent_since = None
            if count > self.attempt.hellos:
                self.leave(f"a rank of attempt {self.attempt.name} was made again (its node was likely lost)")
                return


def _leave(why: str) -> None:
    print(f"torchdeck.trainer: leaving this attempt: {why}; torchrun starts the next", file=sys.stderr, flush=True)
    os._exit(LEAVE_EXIT)
