"""Following a cluster run live: its pods by list + watch, and every pod's
log at once. Used by the kubernetes backend; each holds its own threads.

The watch resumes from the last resourceVersion it saw; 410 Gone means
list again; a failed or dropped connection means reconnect after a backoff
(said through ``on_retry``), and after MAX_RETRIES failures in a row the
watcher gives up with ``error`` set. Logs are one stream (and thread) per
pod, followed again from the start when its container restarts, and from
where they broke off (by the kubelet's timestamps) when a stream breaks."""

from __future__ import annotations

import calendar
import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import BackendError
from .client import ApiError, Unreachable, api_path

if TYPE_CHECKING:
    from .backend import KubernetesBackend

MAX_RETRIES = 8
"""Failed watch connections in a row before the watcher gives up."""


def has_started(pod: dict[str, Any]) -> bool:
    """Whether a container of the pod has run (so it has a log to read)."""
    return any(
        "running" in (cs.get("state") or {}) or "terminated" in (cs.get("state") or {})
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
    )


def node_ranks(pods: list[dict[str, Any]]) -> dict[str, int]:
    """Which node (torchrun's node rank) each pod is, by name, from the labels its operator sets.
    One pass over the pods: a status poll of a 512-pod job asks for them all."""
    labels = [((p.get("metadata") or {}).get("labels") or {}) for p in pods]
    has_master = any(lab.get("training.kubeflow.org/replica-type", "").lower() == "master" for lab in labels)
    names = sorted((p.get("metadata") or {}).get("name", "") for p in pods)
    by_name = {name: i for i, name in enumerate(names)}
    ranks = {}
    for pod, lab in zip(pods, labels):
        name = (pod.get("metadata") or {}).get("name", "")
        kind = lab.get("training.kubeflow.org/replica-type", "").lower()
        index = lab.get("training.kubeflow.org/replica-index") or lab.get("batch.kubernetes.io/job-completion-index")
        if kind == "launcher":
            ranks[name] = -1  # mpirun's output carries every rank; its lines say which
        elif index is not None and str(index).isdigit():
            ranks[name] = int(index) + (1 if kind == "worker" and has_master else 0)
        else:
            ranks[name] = by_name.get(name, 0)
    return ranks


class PodWatcher:
    """A run's pods, kept current by list + watch from a resourceVersion.
    410 Gone: re-list. A dropped or failed connection: reconnect after a
    backoff (0.5 s doubling to 8 s), ``on_retry`` says so; after
    MAX_RETRIES failures in a row, ``error`` is set and it stops."""

    def __init__(
        self,
        backend: KubernetesBackend,
        run_id: str,
        namespace: str,
        on_change: Callable[[dict[str, dict[str, Any]]], None],
        on_retry: Callable[[int, float, str], None] = lambda n, wait, why: None,
    ):
        self.backend, self.run_id, self.namespace = backend, run_id, namespace
        self.on_change, self.on_retry = on_change, on_retry
        self.pods: dict[str, dict[str, Any]] = {}
        self.relists = 0
        self.retries = 0
        self.error: BackendError | None = None
        self._stop = threading.Event()
        self._response = None

    def stop(self) -> None:
        self._stop.set()
        _abort(self._response)

    def run(self) -> None:
        failures = 0
        rv = None
        path = api_path("Pod", self.namespace)
        selector = self.backend.pod_selector(self.run_id)
        while not self._stop.is_set():
            try:
                if rv is None:
                    listing = self.backend.request("GET", path, query={"labelSelector": selector})
                    self.pods = {p["metadata"]["name"]: p for p in listing.get("items", [])}
                    rv = (listing.get("metadata") or {}).get("resourceVersion")
                    self.relists += 1
                    self.on_change(dict(self.pods))
                self._response = self.backend.request(
                    "GET",
                    path,
                    query={
                        "labelSelector": selector,
                        "watch": "true",
                        "resourceVersion": rv,
                        "allowWatchBookmarks": "true",
                        "timeoutSeconds": 300,
                    },
                    stream=True,
                    timeout=None,
                )
                failures = 0
                for line in _lines(self._response):
                    if self._stop.is_set():
                        return
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            rv = None  # expired: list again
                            break
                        raise ApiError(f"the pod watch failed: {obj.get('message', obj)}", "", obj.get("code", 0))
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if kind == "BOOKMARK":
                        continue
                    name = (obj.get("metadata") or {}).get("name") or ""
                    if kind == "DELETED":
                        self.pods.pop(name, None)
                    elif name:
                        self.pods[name] = obj
                    self.on_change(dict(self.pods))
                # the server ended the watch (its timeout, or a cut): go on from rv
            except Exception as exc:  # the API's errors, and urllib3's protocol errors while streaming
                if isinstance(exc, ApiError) and exc.status == 410:
                    rv = None  # expired: list again
                    continue
                if self._stop.is_set() and not isinstance(exc, ApiError):
                    return
                known = isinstance(exc, (BackendError, OSError, ValueError))
                failures = self._failed(failures, str(exc) if known else f"{type(exc).__name__}: {exc}")
                if failures > MAX_RETRIES:
                    return

    def _failed(self, failures: int, why: str) -> int:
        failures += 1
        self.retries += 1
        if failures > MAX_RETRIES:
            self.error = Unreachable(
                f"lost the cluster connection: {failures - 1} retries failed ({why[:160]})",
                "check the network and the kubeconfig, then reopen the monitor",
            )
            self.on_retry(failures, 0.0, why)
            return failures
        wait = min(8.0, 0.5 * 2 ** (failures - 1))
        self.on_retry(failures, wait, why)
        self._stop.wait(wait)
        return failures


class LogPosition:
    """How far a pod's log has been read, by the timestamps the kubelet puts before each line
    (``timestamps=true``): the last one, and how many lines carried it. ``take`` strips them;
    after ``resume`` it also drops what was read before, as a stream asked for again from
    ``since()`` (whole seconds, as the API takes it) sends it again."""

    def __init__(self) -> None:
        self.stamp = b""
        self.same = 0
        self._catching_up: tuple[int, int] | None = None
        self._repeated = 0

    def since(self) -> str | None:
        return self.stamp[:19].decode() + "Z" if self.stamp else None

    def resume(self) -> None:
        if self.stamp:
            self._catching_up, self._repeated = (_nanoseconds(self.stamp), self.same), 0

    def take(self, lines: list[bytes]) -> list[bytes]:
        out = []
        for line in lines:
            stamp, _, text = line.partition(b" ")
            if len(stamp) < 20 or stamp[10:11] != b"T" or not stamp.endswith(b"Z"):
                out.append(line)  # no timestamp: a server that does not send them
                continue
            if self._catching_up is not None:
                at, same = self._catching_up
                now = _nanoseconds(stamp)
                if now < at or (now == at and self._repeated < same):
                    self._repeated += now == at
                    continue  # read before the stream broke
                self._catching_up = None
            if stamp == self.stamp:
                self.same += 1
            else:
                self.stamp, self.same = stamp, 1
            out.append(text)
        return out


def _nanoseconds(stamp: bytes) -> int:
    """An RFC 3339 UTC time with up to nine fraction digits, as integer nanoseconds (exact, so
    equal times compare equal)."""
    whole = calendar.timegm(time.strptime(stamp[:19].decode(), "%Y-%m-%dT%H:%M:%S"))
    fraction = stamp[20:-1] if stamp[19:20] == b"." else b""
    return whole * 1_000_000_000 + int((fraction.decode() + "000000000")[:9])


def _abort(response) -> None:
    """End a streamed response another thread is reading. (Closing it would
    wait for that reader's lock; shutting the socket down wakes the reader.)"""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _dechunked(raw) -> Iterator[bytes]:
    """The body of a chunked HTTP response, read from its socket file as it comes: everything one
    read brought, as one piece. (urllib3's ``stream`` reads chunk by chunk, a line of the chunk's
    size and then its data, three buffered reads and a generator step each: the kubelet sends a
    chunk per log line, and with 128 pods that was half of the metric reader's time.) A connection
    that closes before the last chunk raises ConnectionError, so the stream is asked for again."""
    buf = b""
    need = -1  # bytes of the current chunk not yet taken (-1: its size line is next)
    while True:
        data = raw.read1(65536)
        if not data:  # closed before the last chunk: cut, as urllib3 would say (stop() cuts it too)
            raise ConnectionError("the connection closed in the middle of the response")
        buf = buf + data if buf else data
        pos, out = 0, list[bytes]()
        while True:
            if need < 0:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                need = int(buf[pos:eol].split(b";", 1)[0], 16)
                pos = eol + 2
                if need == 0:  # the last chunk (trailers, if any, are not read)
                    if out:
                        yield b"".join(out)
                    return
            if len(buf) - pos < need + 2:
                break  # the rest of this chunk is still on its way
            out.append(buf[pos : pos + need])
            pos += need + 2
            need = -1
        buf = buf[pos:]
        if out:
            yield b"".join(out)


def _body(response) -> Iterator[bytes]:
    """A streamed response's body as it comes: by the socket where it is chunked (see
    ``_dechunked``), else as urllib3 reads it."""
    fp = getattr(response, "_fp", None)
    raw = getattr(fp, "fp", None)
    if getattr(response, "chunked", False) and raw is not None and getattr(response, "chunk_left", 0) is None:
        try:
            yield from _dechunked(raw)
        finally:
            response.close()  # read past urllib3: its connection is not to be used again
        return
    yield from response.stream(65536, decode_content=False)


def _line_chunks(response) -> Iterator[list[bytes]]:
    """Whole lines from a streamed HTTP response, as they come (a list per read)."""
    pending = b""
    for chunk in _body(response):
        pending += chunk
        *whole, pending = pending.split(b"\n")
        lines = [line for line in whole if line.strip()]
        if lines:
            yield lines
    if pending.strip():
        yield [pending]


def _lines(response) -> Iterator[bytes]:
    """Whole lines from a streamed HTTP response."""
    for lines in _line_chunks(response):
        yield from lines


class PodLogFollower:
    """Every pod's log of one run at once, a thread and a stream per pod,
    into one queue of (node rank, attempt, line). A container that restarts
    is followed again from its new start (attempt = its restart count)."""

    def __init__(self, backend: KubernetesBackend, run_id: str, namespace: str, follow: bool = True):
        self.backend, self.run_id, self.namespace, self.follow = backend, run_id, namespace, follow
        self.queue: queue.SimpleQueue[tuple[int, int, list[bytes]]] = queue.SimpleQueue()
        self._streams: dict[tuple[str, int], threading.Thread] = {}
        self._lock = threading.Lock()
        self._responses: list[Any] = []
        self._stopped = threading.Event()
        self.watcher = PodWatcher(backend, run_id, namespace, self._pods_changed, self._retrying)
        self._watch_thread: threading.Thread | None = None
        self._job_over = False

    def start(self) -> None:
        if self.follow:
            self._watch_thread = threading.Thread(target=self.watcher.run, name=f"watch-{self.run_id}", daemon=True)
            self._watch_thread.start()
        else:
            pods = self.backend.pods(self.run_id, self.namespace)
            self._pods_changed({p["metadata"]["name"]: p for p in pods})

    def _retrying(self, attempt: int, wait: float, why: str) -> None:
        text = (
            f"[torchdeck] lost the pod watch ({why[:120]}); retry {attempt}/{MAX_RETRIES} in {wait:.1f} s"
            if wait
            else f"[torchdeck] gave up after {MAX_RETRIES} retries: {why[:120]}"
        )
        self.queue.put((-1, 0, [text.encode()]))

    def _pods_changed(self, pods: dict[str, dict[str, Any]]) -> None:
        ranks: dict[str, int] | None = None  # worked out once, when a pod's log is new
        for name, pod in pods.items():
            status = pod.get("status") or {}
            statuses = status.get("containerStatuses") or []
            if not has_started(pod):
                continue
            attempt = max((cs.get("restartCount", 0) for cs in statuses), default=0)
            key = (name, attempt)
            with self._lock:
                if key in self._streams or self._stopped.is_set():
                    continue
                if ranks is None:
                    ranks = node_ranks(list(pods.values()))
                rank = ranks[name]
                thread = threading.Thread(
                    target=self._stream, args=(name, rank, attempt, status), name=f"log-{name}", daemon=True
                )
                self._streams[key] = thread
            thread.start()

    def _stream(self, pod: str, rank: int, attempt: int, status: dict[str, Any]) -> None:
        """One container's log, to its end. A stream that breaks (the API server restarted, the
        network dropped) is asked for again from the kubelet's timestamp of the last line read,
        and what was read already is skipped: no line twice, none missed. After MAX_RETRIES
        failures in a row the log is given up, with a line that says so."""
        running = any("running" in (cs.get("state") or {}) for cs in status.get("containerStatuses") or [])
        follow = self.follow and running
        position = LogPosition()
        failures, previous = 0, False
        while not self._stopped.is_set():
            query = {
                "follow": "true" if follow else None,
                "timestamps": "true",
                "sinceTime": position.since(),
                "previous": "true" if previous else None,
            }
            try:
                response = self.backend.request(
                    "GET", api_path("Pod", self.namespace, pod, "log"), query=query, stream=True, timeout=None
                )
                self._responses.append(response)
                for lines in _line_chunks(response):
                    if self._stopped.is_set():
                        return
                    fresh = position.take(lines)
                    if fresh:
                        self.queue.put((rank, attempt, fresh))
                        failures = 0
                return  # the container's log ended
            except Exception as exc:  # the API's errors; urllib3's and the socket's while streaming
                if self._stopped.is_set() or getattr(exc, "status", 0) in (400, 404):
                    return  # stopped, or the pod (or this container) is gone
                why = str(exc) if isinstance(exc, (BackendError, OSError)) else f"{type(exc).__name__}: {exc}"
            failures += 1
            if failures > MAX_RETRIES:
                text = f"[torchdeck] the log of {pod} broke off after {MAX_RETRIES} retries: {why[:160]}"
                self.queue.put((rank, attempt, [text.encode()]))
                return
            self._stopped.wait(min(8.0, 0.5 * 2 ** (failures - 1)))
            position.resume()
            now = self.watcher.pods.get(pod) if self.follow else None
            restarts = max(
                (cs.get("restartCount", 0) for cs in ((now or {}).get("status") or {}).get("containerStatuses") or []),
                default=attempt,
            )
            if restarts > attempt:  # it restarted meanwhile: the rest of this attempt is the previous log
                if restarts > attempt + 1:
                    text = f"[torchdeck] {pod} restarted {restarts - attempt} times while its log was cut off"
                    self.queue.put((rank, attempt, [text.encode()]))
                    return
                follow, previous = False, True

    def _all_done(self) -> bool:
        with self._lock:
            threads = list(self._streams.values())
        if any(t.is_alive() for t in threads):
            return False
        if not self.follow:
            return True
        if self.watcher.error is not None:
            return True
        pods = self.watcher.pods
        return bool(pods) and all(
            (p.get("status") or {}).get("phase") in ("Succeeded", "Failed") for p in pods.values()
        )

    def take(
        self, wait_s: float, linger_s: float = 0.02, limit: int = 8192
    ) -> tuple[list[tuple[int, int, bytes]], bool]:
        """What arrived, and whether the logs are over. Waits up to ``wait_s``
        for the first line, then ``linger_s`` for more: a few batches a
        second, not one per line, however many pods trickle lines in."""
        out: list[tuple[int, int, bytes]] = []
        try:
            rank, attempt, lines = self.queue.get(timeout=wait_s)
            out += [(rank, attempt, line) for line in lines]
            if linger_s:
                time.sleep(linger_s)
            while len(out) < limit:
                rank, attempt, lines = self.queue.get_nowait()
                out += [(rank, attempt, line) for line in lines]
        except queue.Empty:
            pass
        done = not out and self._all_done() and self.queue.empty()
        return out, done

    def stop(self) -> None:
        self._stopped.set()
        self.watcher.stop()
        for response in list(self._responses):
            _abort(response)
