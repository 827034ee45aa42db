"""A big run's pods kept by a watch while they are asked for again and again (the monitor asks for
its run's status once a second). A LIST of 1,024 pods is megabytes of JSON for the API server to make
and for the console to read, every time; a watch sends what changes, and the API server's load no
longer grows with the pods shown. A run of a few pods, or pods asked for once (a ``status`` from the
command line), are listed as before: what a LIST says is never older than the request."""

from __future__ import annotations

import threading
import time

from .client import KubeClient
from .objects import Pod
from .ownership import OwnedBy
from .streams import PodWatcher

WATCH_FROM_PODS = 64
"""Pods from which a run asked for again is watched rather than listed."""
ASKED_AGAIN_S = 10.0
"""Asked for again within this long: someone follows the run (a monitor)."""
IDLE_S = 30.0
"""A watch nobody asked for this long ends."""


class PodWatch:
    """One selector's pods, kept current by a ``PodWatcher`` on a thread of its own. ``pods()`` is
    None until its first listing came, and while its connection is broken (the caller lists)."""

    def __init__(self, client: KubeClient, namespace: str, selector: str, owned: OwnedBy | None):
        self._latest: dict[str, Pod] | None = None
        self._broken = False
        self.asked = time.monotonic()
        self.owned = owned
        """Which of the selector's pods are the run's: asked at each read, not as the watch takes a
        pod in (an owner between the job and a pod that could not be read once is asked again)."""
        self.watcher = PodWatcher(
            client, selector, namespace, self._changed, self._retrying, on_watching=self._watching, on_stale=self._stale
        )
        self._thread = threading.Thread(target=self.watcher.run, name=f"pods-{selector[:40]}", daemon=True)
        self._thread.start()
        self._idle_check()

    def _idle_check(self) -> None:
        """End the watch once nobody has asked for IDLE_S (the monitor closed); else look again then."""
        if time.monotonic() - self.asked > IDLE_S:
            self.stop()
            self._latest = None  # its pods go now, not when the next ask drops the watch
            return
        timer = threading.Timer(IDLE_S / 2, self._idle_check)
        timer.daemon = True
        timer.start()

    def _changed(self, pods: dict[str, Pod]) -> None:
        self._latest, self._broken = pods, False  # the watcher's copy: read whole by other threads

    def _retrying(self, attempt: int, wait: float, why: str) -> None:
        self._broken = True

    def _watching(self) -> None:
        self._broken = False  # connected again from where its pods are: current, changed or not

    def _stale(self) -> None:
        self._broken = True  # its version expired: old until the watcher has listed them again

    def pods(self) -> list[Pod] | None:
        self.asked = time.monotonic()
        latest = self._latest
        if latest is None or self._broken or not self._thread.is_alive():
            return None
        owned = self.owned
        return [p for p in latest.values() if owned is None or owned(p)]

    @property
    def ended(self) -> bool:
        return not self._thread.is_alive()

    def stop(self) -> None:
        self.watcher.stop()


class WatchedPods:
    """The watches a backend holds, by (namespace, selector, job uid): started for a run of
    ``WATCH_FROM_PODS`` pods or more asked for twice within ``ASKED_AGAIN_S``, ended ``IDLE_S``
    after the last ask (or when their watch gave up)."""

    def __init__(self, client: KubeClient):
        self.client = client
        self._watches: dict[tuple[str, str, str], PodWatch] = {}
        self._listed: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[type[WatchedPods], tuple[KubeClient]]:
        """A copy for another process holds no watch: it starts its own."""
        return WatchedPods, (self.client,)

    def pods(self, namespace: str, selector: str, owned: OwnedBy | None) -> list[Pod]:
        """The pods that match ``selector`` in ``namespace`` that ``owned`` keeps: from the watch
        where one serves them, else from a LIST. (A job made again under its name has an owner of
        its own uid, and so a watch of its own.)"""
        key = (namespace, selector, owned.uid if owned is not None else "")
        now = time.monotonic()
        with self._lock:
            self._end_idle(now)
            watch = self._watches.get(key)
        if watch is not None:
            kept = watch.pods()
            if kept is not None:
                return kept
        found = self.client.read_pods(namespace, selector)
        mine = found if owned is None else [p for p in found if owned(p)]
        with self._lock:
            again = now - self._listed.get(key, float("-inf")) < ASKED_AGAIN_S
            self._listed[key] = now
            if again and len(mine) >= WATCH_FROM_PODS and key not in self._watches:
                self._watches[key] = PodWatch(self.client, namespace, selector, owned)
        return mine

    def watching(self) -> list[tuple[str, str, str]]:
        """The (namespace, selector, job uid) of each watch held now."""
        with self._lock:
            return sorted(self._watches)

    def _end_idle(self, now: float) -> None:
        for key, watch in list(self._watches.items()):
            if watch.ended or now - watch.asked > IDLE_S:
                watch.stop()
                del self._watches[key]
        for key, at in list(self._listed.items()):
            if now - at > ASKED_AGAIN_S:
                del self._listed[key]
