"""The ranks of an attempt agree on its name through torch's own TCPStore (the store torchrun's agent
shares with its workers), whatever an earlier attempt left in it: a rank made again on another node
(torchrun's restart count 0) joins ranks that have restarted, and no stale key misleads either."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist

from torchdeck.trainer import attempt as attempts
from torchdeck.trainer.attempt import HELLOS, PREFIX, NoAgreement, Watch, agreed


def store_server():
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    return server, lambda: dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=timedelta(seconds=30))


def attempt(client, ranks, late: dict[int, float] | None = None, timeout_s: float = 60.0) -> dict[int, Any]:
    """Each rank in a thread of its own, with a store connection of its own; what each agreed on."""
    found: dict[int, Any] = {}

    def one(rank: int) -> None:
        time.sleep((late or {}).get(rank, 0.0))
        try:
            found[rank] = agreed(client(), rank, len(ranks), timeout_s)
        except NoAgreement as error:
            found[rank] = error

    threads = [threading.Thread(target=one, args=(rank,)) for rank in ranks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 30)
    return found


def test_every_rank_agrees_and_the_next_attempt_has_a_name_of_its_own():
    server, client = store_server()
    first = attempt(client, [0, 1, 2], late={2: 0.5})  # a rank that comes late is waited for
    assert len(set(first.values())) == 1 and first[0].hellos == 2  # every rank's hello counted
    second = attempt(client, [0, 1, 2], late={0: 0.5})  # rank 0 last: the others' stale answers wait
    assert len(set(second.values())) == 1 and second[0].name != first[0].name and second[0].hellos == 4


def test_a_stale_answer_from_a_dead_attempt_is_not_taken_for_this_ones():
    """What a node's loss leaves in the store: rank 1's hello, answer and confirmation of an attempt
    whose ranks are gone. The rank made again takes none of them; it gets this attempt's number."""
    server, client = store_server()
    old = attempt(client, [0, 1])
    assert server.get(f"{PREFIX}/answer/1").decode().endswith(f":{old[0].name}")
    again = attempt(client, [0, 1], late={0: 1.0})  # the replaced rank reads the old answer first
    assert again[0] == again[1] != old[0]


def test_a_rank_that_never_comes_fails_the_attempt_naming_it():
    server, client = store_server()
    assert agreed(client(), 0, 1).name == "solo"  # a world of one waits for nobody
    with pytest.raises(NoAgreement, match=r"rank\(s\) 1 did not join attempt \d+ in 1 s"):
        agreed(client(), 0, 2, timeout_s=1.0)
    with pytest.raises(NoAgreement, match="rank 0 did not answer rank 3 in 1 s"):
        agreed(client(), 3, 4, timeout_s=1.0)


def test_a_rank_of_a_lost_attempt_leaves_once_a_rank_is_made_again_or_the_store_goes_silent(monkeypatch):
    """The ranks of the attempt a replaced rank left behind may be stuck in a collective with a frozen
    or cut-off peer; their watch sees the new rank's hello (or the store's silence) and leaves."""
    monkeypatch.setattr(attempts, "WATCH_EVERY_S", 0.1)
    monkeypatch.setattr(attempts, "STORE_SILENT_S", 0.5)
    server, client = store_server()
    joined = attempt(client, [0, 1])
    left: list[str] = []
    watch = Watch(joined[0], 0, client, left.append).start()
    time.sleep(0.5)
    assert left == []  # a healthy attempt: nothing to leave for
    client().add(HELLOS, 1)  # rank 1, made again on another node, says hello
    watch.thread.join(10)
    assert left == [f"a rank of attempt {joined[0].name} was made again (its node was likely lost)"]

    def gone():
        raise RuntimeError("Connection refused")

    silent: list[str] = []
    Watch(joined[0], 0, gone, silent.append).start().thread.join(10)
    assert silent and silent[0].startswith("the job's store has not answered for 0.5 s (Connection refused)")
