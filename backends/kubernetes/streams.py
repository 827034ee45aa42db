"""Following a cluster run live: its pods by list + watch, and every pod's
log at once. Used by the kubernetes backend; each holds its own threads.

The watch resumes from the last resourceVersion it saw; 410 Gone means
list again; a failed or dropped connection means reconnect after a backoff
(said through ``on_retry``), and after MAX_RETRIES failures in a row the
watcher gives up with ``error`` set. Logs are one stream (and thread) per
pod, followed again from the start when its container restarts, and from
where they broke off (by the kubelet's timestamps) when a stream breaks.

Why one module of this size: the watch and the log followers share the reconnect and resume
logic, and its threads' shutdown; splitting them would split that logic."""

from __future__ import annotations

import calendar
import contextlib
import heapq
import json
import os
import queue
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..errors import BackendError
from .client import ApiError, KubeClient, Unreachable, api_path
from .objects import Pod, PodList, WatchEvent

if TYPE_CHECKING:
    from urllib3.response import BaseHTTPResponse

MAX_RETRIES = 8
"""Failed watch connections in a row before the watcher gives up."""
WATCH_S = 300
"""How long the API server holds a watch open before it ends it (the watcher goes on from there); a
read waits this and half a minute more before the connection is taken for dead."""


def has_started(pod: Pod) -> bool:
    """Whether a container of the pod has run (so it has a log to read)."""
    return pod.has_started


def node_ranks(pods: Sequence[Pod]) -> dict[str, int]:
    """Which node (torchrun's node rank) each pod is, by name, from the labels its operator sets.
    One pass over the pods: a status poll of a 512-pod job asks for them all."""
    views = list(pods)
    labels = [p.labels for p in views]
    has_master = any(lab.get("training.kubeflow.org/replica-type", "").lower() == "master" for lab in labels)
    names = sorted(p.name for p in views)
    by_name = {name: i for i, name in enumerate(names)}
    ranks = {}
    for pod, lab in zip(views, labels):
        name = pod.name
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
        client: KubeClient,
        selector: str,
        namespace: str,
        on_change: Callable[[dict[str, Pod]], None],
        on_retry: Callable[[int, float, str], None] = lambda n, wait, why: None,
        owned: Callable[[Pod], bool] | None = None,
        on_watching: Callable[[], None] = lambda: None,
        on_stale: Callable[[], None] = lambda: None,
    ):
        self.client, self.selector, self.namespace = client, selector, namespace
        """The connection, and the label selector of the run's pods (``pod_selector``)."""
        self.owned = owned
        """Which of the pods the selector finds are the run's (its job owns them: ``ownership``);
        None: every one (a job without a uid)."""
        self.on_change, self.on_retry = on_change, on_retry
        self.on_watching, self.on_stale = on_watching, on_stale
        """``on_watching``: called each time a watch is connected again from the version its pods are
        at (the changes since come next): what the pods say is current again, changed or not.
        ``on_stale``: called when that version has expired (410): the pods are old until listed again."""
        self.pods: dict[str, Pod] = {}
        self.relists = 0
        self.retries = 0
        self.error: BackendError | None = None
        self._stop = threading.Event()
        self._response: BaseHTTPResponse | None = None

    def stop(self) -> None:
        self._stop.set()
        _abort(self._response)

    def run(self) -> None:
        failures = 0
        rv = None
        path = api_path("Pod", self.namespace)
        selector = self.selector
        while not self._stop.is_set():
            try:
                if rv is None:
                    listing = PodList.from_pages(self.client.list_pages(path, {"labelSelector": selector}))
                    self.pods = {p.name: p for p in self.theirs(listing.pods)}
                    rv = listing.resource_version
                    self.relists += 1
                    self.on_change(dict(self.pods))
                self._response = self.client.request(
                    "GET",
                    path,
                    query={
                        "labelSelector": selector,
                        "watch": "true",
                        "resourceVersion": rv,
                        "allowWatchBookmarks": "true",
                        "timeoutSeconds": WATCH_S,
                    },
                    stream=True,
                    timeout=WATCH_S + 30,  # a connection gone silent (half-open) is asked for again
                )
                failures = 0
                self.on_watching()
                for line in _lines(self._response):
                    if self._stop.is_set():
                        return
                    event = WatchEvent.from_api(json.loads(line))
                    kind, pod = event.type, event.pod
                    if kind == "ERROR":
                        if event.code == 410:
                            rv = None  # expired: list again
                            self.on_stale()
                            break
                        raise ApiError(f"the pod watch failed: {event.error}", "", event.code)
                    rv = pod.meta.resource_version or rv
                    if kind == "BOOKMARK":
                        continue
                    name = pod.name
                    if kind == "DELETED":
                        self.pods.pop(name, None)
                    elif name and not self.theirs([pod]):
                        continue  # a pod with the run's labels that its job does not own
                    elif name:
                        self.pods[name] = pod
                    self.on_change(dict(self.pods))
                # the server ended the watch (its timeout, or a cut): go on from rv
            except Exception as exc:  # the API's errors, and urllib3's protocol errors while streaming
                if isinstance(exc, ApiError) and exc.status == 410:
                    rv = None  # expired: list again
                    self.on_stale()
                    continue
                if self._stop.is_set() and not isinstance(exc, ApiError):
                    return
                known = isinstance(exc, (BackendError, OSError, ValueError))
                failures = self._failed(failures, str(exc) if known else f"{type(exc).__name__}: {exc}")
                if failures > MAX_RETRIES:
                    return

    def theirs(self, pods: list[Pod]) -> list[Pod]:
        """The pods among ``pods`` that are the run's."""
        return pods if self.owned is None else [p for p in pods if self.owned(p)]

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


def _abort(response: object) -> None:
    """End a streamed response another thread is reading. (Closing it would
    wait for that reader's lock; shutting the socket down wakes the reader.)"""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Dechunker:
    """The body of a chunked HTTP response from its bytes as they come off the socket, in any
    pieces. (urllib3 reads chunk by chunk, a line of the chunk's size and then its data, three
    buffered reads and a generator step each: the kubelet sends a chunk per log line, and with
    128 pods that was half of the metric reader's time.)"""

    def __init__(self) -> None:
        self._buf = b""
        self._need = -1  # bytes of the current chunk not yet taken (-1: its size line is next)
        self.ended = False
        """The last (empty) chunk came: the body is whole."""

    def feed(self, data: bytes) -> bytes:
        """What of the body these bytes complete (b"" if none yet)."""
        if self.ended:
            return b""
        buf = self._buf + data if self._buf else data
        pos, need, out = 0, self._need, list[bytes]()
        while True:
            if need < 0:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                need = int(buf[pos:eol].split(b";", 1)[0], 16)
                pos = eol + 2
                if need == 0:  # the last chunk (trailers, if any, are not read)
                    self.ended = True
                    break
            if len(buf) - pos < need + 2:
                break  # the rest of this chunk is still on its way
            out.append(buf[pos : pos + need])
            pos += need + 2
            need = -1
        self._buf, self._need = buf[pos:], need
        return b"".join(out)


class SocketFile(Protocol):
    """The buffered socket file under an HTTP response (``read1``: what one read brings)."""

    def read1(self, size: int = ..., /) -> bytes: ...


class ResponseFile(SocketFile, Protocol):
    """The socket file of a response, which ``_open`` closes once it reads the socket alone."""

    def close(self) -> None: ...


def _dechunked(raw: SocketFile) -> Iterator[bytes]:
    """A chunked body read from its socket file (``read1``): everything one read brought, as one
    piece. A connection that closes before the last chunk raises ConnectionError, so the stream is
    asked for again."""
    body = Dechunker()
    while not body.ended:
        data = raw.read1(65536)
        if not data:  # closed before the last chunk: cut, as urllib3 would say (stop() cuts it too)
            raise ConnectionError("the connection closed in the middle of the response")
        piece = body.feed(data)
        if piece:
            yield piece


def _chunked_socket_file(response: object) -> ResponseFile | None:
    """The socket file under a streamed urllib3 response whose body is chunked and not yet read
    (None otherwise): what ``Dechunker`` can read past urllib3."""
    raw = getattr(getattr(response, "_fp", None), "fp", None)
    if getattr(response, "chunked", False) and raw is not None and getattr(response, "chunk_left", 0) is None:
        return raw
    return None


def _split_lines(pending: bytes, data: bytes) -> tuple[list[bytes], bytes]:
    """The whole, non-blank lines of ``pending + data``, and the start of a line still to come."""
    *whole, rest = (pending + data if pending else data).split(b"\n")
    return [line for line in whole if line.strip()], rest


def _body(response: BaseHTTPResponse) -> Iterator[bytes]:
    """A streamed response's body as it comes: by the socket where it is chunked (see
    ``_dechunked``), else as urllib3 reads it."""
    raw = _chunked_socket_file(response)
    if raw is not None:
        try:
            yield from _dechunked(raw)
        finally:
            response.close()  # read past urllib3: its connection is not to be used again
        return
    yield from response.stream(65536, decode_content=False)


def _line_chunks(response: BaseHTTPResponse) -> Iterator[list[bytes]]:
    """Whole lines from a streamed HTTP response, as they come (a list per read)."""
    pending = b""
    for chunk in _body(response):
        lines, pending = _split_lines(pending, chunk)
        if lines:
            yield lines
    if pending.strip():
        yield [pending]


def _lines(response: BaseHTTPResponse) -> Iterator[bytes]:
    """Whole lines from a streamed HTTP response."""
    for lines in _line_chunks(response):
        yield from lines


@dataclass
class LogStream:
    """One container's log being read, and how to ask for it again if it breaks."""

    pod: str
    rank: int
    attempt: int
    follow: bool
    previous: bool = False
    position: LogPosition = field(default_factory=LogPosition)
    failures: int = 0
    done: bool = False
    """Read to its end, or given up."""
    response: BaseHTTPResponse | None = None
    """The response while its headers are read, and for a body read on a thread of its own."""
    sock: socket.socket | None = None
    """A chunked body's socket, read by the reading thread alone once the headers are in."""
    body: Dechunker = field(default_factory=Dechunker)
    pending: bytes = b""
    """The start of a line whose end has not come yet."""
    early: bytes = b""
    """Body that came in with the response's headers, for the reading thread to take first."""


OPENERS = 8
"""Log requests made at once (opening 512 streams one by one takes a while on a remote cluster)."""

QUEUED_LINES = 4096
"""Lines read and not yet taken, at most, before the reading thread waits for ``take``: a catch-up
(every pod's log from its start, as a monitor opened on a running job reads them) comes at the
pace it is parsed, the rest waiting in the sockets, not all of it in memory at once (1,024 pods'
backlogs held about 100 MB, a peak the allocator then kept)."""

GATHER_S = 0.1
"""How long the reading thread waits after a pass that read something, so that the next pass finds
several lines on each socket rather than one (the kubelet sends a chunk per line, and every read is a
system call and a few Python calls): a tenth of a second later at most, against half the reads."""


class PodLogFollower:
    """Every pod's log of one run at once, into one queue of (node rank, attempt, line). A container
    that restarts is followed again from its new start (attempt = its restart count).

    The streams are opened by a few threads (``OPENERS``) and then read by one, which waits on all
    their sockets at once (``selectors``): a thread a pod held 0.2 MB each (100 MB for 512 pods) and
    woke for every line. A stream whose body is not chunked is read on a thread of its own, as
    before."""

    def __init__(
        self,
        client: KubeClient,
        selector: str,
        run_id: str,
        namespace: str,
        follow: bool = True,
        owned: Callable[[Pod], bool] | None = None,
    ):
        self.client, self.run_id, self.namespace, self.follow = client, run_id, namespace, follow
        self.queue: queue.SimpleQueue[tuple[int, int, list[bytes]]] = queue.SimpleQueue()
        self._queued = 0
        """Lines in ``queue`` (under ``_counting``): the reading thread waits while there are QUEUED_LINES."""
        self._turn = 0
        self._counting = threading.Lock()
        self._room = threading.Event()
        self._streams: dict[tuple[str, int], LogStream] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.watcher = PodWatcher(client, selector, namespace, self._pods_changed, self._retrying, owned)
        self._watch_thread: threading.Thread | None = None
        self._openers = ThreadPoolExecutor(OPENERS, thread_name_prefix=f"logs-{run_id}")
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._ready: queue.SimpleQueue[LogStream] = queue.SimpleQueue()
        """Streams opened, for the reading thread to take on."""
        self._reopen: list[tuple[float, int, LogStream]] = []
        """(when, tie-breaker, stream): broken streams waiting out their backoff (a heap)."""
        self._reader = threading.Thread(target=self._read_all, name=f"log-reader-{run_id}", daemon=True)

    def start(self) -> None:
        self._reader.start()
        if self.follow:
            self._watch_thread = threading.Thread(target=self.watcher.run, name=f"watch-{self.run_id}", daemon=True)
            self._watch_thread.start()
        else:
            pods = self.watcher.theirs(self.client.read_pods(self.namespace, self.watcher.selector))
            self._pods_changed({p.name: p for p in pods})

    def _retrying(self, attempt: int, wait: float, why: str) -> None:
        text = (
            f"[torchdeck] lost the pod watch ({why[:120]}); retry {attempt}/{MAX_RETRIES} in {wait:.1f} s"
            if wait
            else f"[torchdeck] gave up after {MAX_RETRIES} retries: {why[:120]}"
        )
        self._put(-1, 0, [text.encode()])

    def _pods_changed(self, pods: dict[str, Pod]) -> None:
        ranks: dict[str, int] | None = None  # worked out once, when a pod's log is new
        for name, pod in pods.items():
            if not pod.has_started:
                continue
            attempt = pod.restarts
            key = (name, attempt)
            with self._lock:
                if key in self._streams or self._stopped.is_set():
                    continue
                if ranks is None:
                    ranks = node_ranks(list(pods.values()))
                running = any(cs.running for cs in pod.containers)
                stream = LogStream(name, ranks[name], attempt, follow=self.follow and running)
                self._streams[key] = stream
            self._openers.submit(self._open, stream)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def _open(self, stream: LogStream) -> None:
        """Ask for the log (again, from where it broke off), on an opener thread; the reading
        thread takes it from there."""
        if self._stopped.is_set():
            stream.done = True
            return
        query = {
            "follow": "true" if stream.follow else None,
            "timestamps": "true",
            "sinceTime": stream.position.since(),
            "previous": "true" if stream.previous else None,
        }
        try:
            response = self.client.request(
                "GET", api_path("Pod", self.namespace, stream.pod, "log"), query=query, stream=True, timeout=None
            )
        except Exception as exc:  # the API's errors; urllib3's and the socket's
            self._broke(stream, exc)
            return
        stream.response, stream.body, stream.pending = response, Dechunker(), b""  # a cut line is read again
        raw = _chunked_socket_file(response)
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if raw is None or sock is None:
            threading.Thread(target=self._read_one, args=(stream,), name=f"log-{stream.pod}", daemon=True).start()
            return
        sock.setblocking(False)
        stream.sock = sock
        try:
            early = raw.read1(65536)  # what came in with the headers (never blocks now)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            early = b""
        stream.early = stream.body.feed(early) if early else b""
        if self._stopped.is_set():  # stopped while it opened: nobody will read it
            self._finish(stream, {}, None)
            return
        # From here the socket is read alone: the response's objects (urllib3's, http.client's, the
        # socket file and its buffer: about 10 KB a stream) go, and the socket is the stream's to close.
        connection = response.connection
        if connection is not None:
            connection.sock = None  # (the connection's close, when its response goes, leaves the socket open)
        raw.close()
        stream.response = None
        self._ready.put(stream)
        self._wake()

    def _read_one(self, stream: LogStream) -> None:
        """A body that is not chunked, read on this thread to its end."""
        assert stream.response is not None  # (``_open`` set it)
        try:
            for lines in _line_chunks(stream.response):
                if self._stopped.is_set():
                    break
                self._deliver(stream, lines)
        except Exception as exc:
            self._broke(stream, exc)
            return
        stream.done = True

    def _deliver(self, stream: LogStream, lines: list[bytes]) -> None:
        fresh = stream.position.take(lines)
        if fresh:
            self._put(stream.rank, stream.attempt, fresh)
            stream.failures = 0

    def _put(self, rank: int, attempt: int, lines: list[bytes]) -> None:
        """Lines for ``take``, counted: the reading thread waits while QUEUED_LINES wait."""
        with self._counting:
            self._queued += len(lines)
            if self._queued >= QUEUED_LINES:
                self._room.clear()
        self.queue.put((rank, attempt, lines))

    def _take_bytes(self, stream: LogStream, body: bytes) -> None:
        """Whole lines of a stream's body, handed on; the rest kept for its next bytes."""
        if not body:
            return
        lines, stream.pending = _split_lines(stream.pending, body)
        if lines:
            self._deliver(stream, lines)

    def _read_all(self) -> None:
        """The reading thread: every open stream's socket at once, and the broken ones asked for
        again when their backoff is over."""
        live: dict[int, LogStream] = {}
        while not self._stopped.is_set():
            if self._queued >= QUEUED_LINES:  # the lines read wait to be parsed: the sockets keep the rest
                self._room.wait(0.5)
                continue
            timeout = 0.5
            if self._reopen:
                timeout = max(0.0, min(timeout, self._reopen[0][0] - time.monotonic()))
            read = False
            ready = self._selector.select(timeout)
            self._turn = (self._turn + 1) % max(1, len(ready))  # who reads first, in turn: none starves
            for key, _ in ready[self._turn :] + ready[: self._turn]:
                stream = key.data
                if stream is None:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 4096)
                    continue
                if self._queued >= QUEUED_LINES:
                    break  # the rest next pass (they stay ready: the selector asks the sockets again)
                self._read_ready(stream, live)
                read = True
            while True:  # streams the openers have opened
                try:
                    stream = self._ready.get_nowait()
                except queue.Empty:
                    break
                early, stream.early = stream.early, b""
                self._take_bytes(stream, early)
                if stream.body.ended:
                    self._finish(stream, live, None)
                    continue
                assert stream.sock is not None  # (``_open`` set it for what it hands on)
                try:
                    self._selector.register(stream.sock, selectors.EVENT_READ, stream)
                    live[stream.sock.fileno()] = stream
                except (OSError, ValueError) as exc:
                    self._finish(stream, live, exc)
                    continue
                if self._queued < QUEUED_LINES or (isinstance(stream.sock, ssl.SSLSocket) and stream.sock.pending()):
                    self._read_ready(stream, live)  # a TLS socket may hold decrypted bytes already
            now = time.monotonic()
            due = []
            with self._lock:
                while self._reopen and self._reopen[0][0] <= now:
                    due.append(heapq.heappop(self._reopen)[2])
            for stream in due:
                self._openers.submit(self._open, stream)
            if read:
                self._stopped.wait(GATHER_S)
        for stream in list(live.values()):
            self._finish(stream, live, None)
        self._close_ready()

    def _close_ready(self) -> None:
        """Streams opened and not yet taken on by the reading thread (it has ended): their sockets
        close now, not when the follower is collected (the API server holds a followed log open)."""
        while True:
            try:
                stream = self._ready.get_nowait()
            except queue.Empty:
                return
            self._finish(stream, {}, None)

    def _read_ready(self, stream: LogStream, live: dict[int, LogStream]) -> None:
        """Read what a stream's socket has (without waiting); its end or its break are dealt with."""
        sock = stream.sock
        if sock is None:
            return
        try:
            while True:
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    return
                if not data:
                    raise ConnectionError("the connection closed in the middle of the response")
                self._take_bytes(stream, stream.body.feed(data))
                if stream.body.ended:
                    self._finish(stream, live, None)
                    return
                if len(data) < 65536 and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                    return
        except Exception as exc:  # the socket's errors, a body that is not HTTP chunks
            self._finish(stream, live, exc)

    def _finish(self, stream: LogStream, live: dict[int, LogStream], error: Exception | None) -> None:
        """A stream's response is over: the log ended (``error`` None), or it broke."""
        if stream.sock is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                live.pop(stream.sock.fileno(), None)
                self._selector.unregister(stream.sock)
        if stream.response is not None:
            with contextlib.suppress(Exception):
                stream.response.close()
        elif stream.sock is not None:
            with contextlib.suppress(OSError):
                stream.sock.close()
        stream.sock = None
        if error is None:
            if stream.pending.strip():
                self._deliver(stream, [stream.pending])
            stream.done = True
        else:
            self._broke(stream, error)

    def _broke(self, stream: LogStream, exc: Exception) -> None:
        """A log stream failed (the API server restarted, the network dropped): it is asked for
        again after a backoff, from the kubelet's timestamp of the last line read, and what was read
        already is skipped: no line twice, none missed. After MAX_RETRIES failures in a row the log
        is given up, with a line that says so."""
        if self._stopped.is_set() or getattr(exc, "status", 0) in (400, 404):
            stream.done = True  # stopped, or the pod (or this container) is gone
            return
        why = str(exc) if isinstance(exc, (BackendError, OSError)) else f"{type(exc).__name__}: {exc}"
        stream.failures += 1
        if stream.failures > MAX_RETRIES:
            text = f"[torchdeck] the log of {stream.pod} broke off after {MAX_RETRIES} retries: {why[:160]}"
            self._put(stream.rank, stream.attempt, [text.encode()])
            stream.done = True
            return
        stream.position.resume()
        now = self.watcher.pods.get(stream.pod) if self.follow else None
        restarts = now.restarts if now is not None and now.containers else stream.attempt
        if restarts > stream.attempt:  # it restarted meanwhile: the rest of this attempt is the previous log
            if restarts > stream.attempt + 1:
                text = f"[torchdeck] {stream.pod} restarted {restarts - stream.attempt} times while its log was cut off"
                self._put(stream.rank, stream.attempt, [text.encode()])
                stream.done = True
                return
            stream.follow, stream.previous = False, True
        wait = min(8.0, 0.5 * 2 ** (stream.failures - 1))
        with self._lock:
            heapq.heappush(self._reopen, (time.monotonic() + wait, id(stream), stream))
        self._wake()

    def _all_done(self) -> bool:
        with self._lock:
            streams = list(self._streams.values())
        if not all(stream.done for stream in streams):
            return False
        if not self.follow:
            return True
        if self.watcher.error is not None:
            return True
        pods = self.watcher.pods
        return bool(pods) and all(p.ended for p in pods.values())

    def take(
        self, wait_s: float, linger_s: float = 0.02, limit: int = 2048
    ) -> tuple[list[tuple[int, int, bytes]], bool]:
        """What arrived, and whether the logs are over. Waits up to ``wait_s``
        for the first line, then ``linger_s`` for more: a few batches a
        second, not one per line, however many pods trickle lines in. At most
        about ``limit`` lines a call: a catch-up after a stall is parsed in
        slices, so its peak (the lines, their records and events at once)
        stays small, and the memory the allocator takes for it too."""
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
        if out:
            with self._counting:
                self._queued -= len(out)
                if self._queued < QUEUED_LINES:
                    self._room.set()
        done = not out and self._all_done() and self.queue.empty()
        return out, done

    def stop(self) -> None:
        self._stopped.set()
        self._room.set()  # a reading thread waiting for room sees the stop at once
        self.watcher.stop()
        self._wake()
        self._openers.shutdown(wait=False, cancel_futures=True)
        if self._reader.is_alive():
            self._reader.join(2)
        self._close_ready()
        for stream in list(self._streams.values()):
            if stream.response is not None and not stream.done:
                _abort(stream.response)  # a body read on a thread of its own
        self._selector.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
