"""A stop asked of the trainer from outside: SIGTERM, which torchrun forwards to its ranks when it
is stopped (``torchdeck stop``, a budget reached, a Kubernetes pod deleted or a job suspended).

Python's default is to die at once, losing the work since the last snapshot. Here the signal only
sets a flag; the ranks agree on it at a step they all reach (``Trainer.stop_agreed``), rank 0
writes a snapshot there, and every rank exits. A rank stuck where it cannot reach that step (a
hung collective, where Python's handlers do not run) still ends: the signal's byte on a wake-up
pipe, which the interpreter writes from its C handler whatever the main thread is doing, starts a
watchdog that ends the process ``grace_s`` later, inside torchrun's and Kubernetes' 30 s."""

from __future__ import annotations

import os
import signal
import threading

GRACE_S = 25.0
"""How long a rank may take, after SIGTERM, to reach its next step and write a snapshot."""
PARTIAL_STOP_RECHECK_S = 1.0
"""How long the ranks wait, when only some were asked to stop, before they look again: the signal
of a whole stop (torchrun's, a job's pods deleted together) reaches each rank a moment apart."""


class RanksStopped(Exception):
    """Some ranks, not all, were asked to stop (their pod deleted or evicted, a node drained): the run
    goes on. Every rank has left the step it agreed on, after a snapshot, for the next attempt
    (torchrun's restart, the operator's new pod), which resumes from it."""

    def __init__(self, ranks: int, step: int):
        super().__init__(
            f"{ranks} rank(s) were asked to stop (a pod deleted or evicted), not the run: every rank "
            f"leaves at step {step}, after a snapshot, for a restart that resumes from it"
        )
        self.ranks, self.step = ranks, step


class StopRequest:
    """Whether a stop has been asked (``asked``); ``install`` once, in the main thread."""

    def __init__(self, grace_s: float = GRACE_S):
        self.grace_s = grace_s
        self.asked = False
        self.signal_name = ""

    def install(self) -> bool:
        """Take SIGTERM over; False where it cannot be (not the main thread, no signals here)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            read_end, write_end = os.pipe()
            os.set_blocking(write_end, False)
            signal.signal(signal.SIGTERM, self._asked)
            signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        except (OSError, ValueError):
            return False
        threading.Thread(target=self._watchdog, args=(read_end,), name="torchdeck-stop-watchdog", daemon=True).start()
        return True

    def _asked(self, signum: int, frame: object) -> None:
        self.asked, self.signal_name = True, signal.Signals(signum).name

    def _watchdog(self, read_end: int) -> None:
        while True:
            try:
                got = os.read(read_end, 64)
            except OSError:
                return
            if not got:
                return
            if signal.SIGTERM in got:
                threading.Event().wait(self.grace_s)
                os._exit(128 + signal.SIGTERM)
