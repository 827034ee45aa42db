"""A Kubernetes API for the tests: kmock's ``KubernetesEmulator`` (a real
HTTP server on 127.0.0.1, reached through a kubeconfig with the official
client), run on its own thread, with the gaps that matter to torchdeck
closed here in a subclass:

- create answers 201 Created, as the API server does (kmock answers 200, and
  the official client then returns None for custom objects), and gives the
  object a uid of its own, whatever the body said (kmock keeps none);
- label selectors filter lists and watches (kmock ignores them); ``limit`` and
  ``continue`` page a list (the token here is the list's version and the next item's place; one
  from before ``compact()`` answers 410 Expired, as the API server does once etcd compacted it);
- every change gets a resourceVersion; lists carry the current one; a watch
  from a resourceVersion replays what changed after it, and answers 410 Gone
  (an ERROR event) when that version has been compacted away;
- watches can be scripted to fail: ``fail_next_watch("gone")`` or
  ``fail_next_watch("cut", after=3)`` (the connection drops after 3 events);
- namespaces are served from ``namespaces`` (kmock cannot parse
  /api/v1/namespaces);
- pod logs are scripted: ``script_log(ns, pod, lines, rate=...)``, followed
  with ``follow=true`` as the kubelet streams them, with ``timestamps=true``
  ``sinceTime`` and ``tailLines`` as the kubelet serves them;
- the pod proxy (/pods/NAME:PORT/proxy/PATH) answers from ``proxied``, for a
  DCGM exporter's metrics; metrics.k8s.io node metrics are a built-in resource;
- Kueue's visibility API (an extension API server on a real cluster) answers a
  LocalQueue's pending workloads from ``visibility`` by (namespace, name), and a
  ClusterQueue's by ("", name) (404 where it holds none), at the versions
  ``visibility_versions`` lists, as its group's discovery does (Kueue 0.19's two;
  an older Kueue's v1alpha1 alone);
- only the newest ``KEPT_REQUESTS`` requests are kept. kmock keeps every one,
  and matches each new request to its reactions by scanning them all, so its
  cost per request grows with every request served: about 10 minutes into a
  benchmark (128 followed pods) it held the server at a whole core. No test
  reads the request history.

Tests act as the operator and the kubelet would: they create and patch pods
through the same API."""

from __future__ import annotations

import asyncio
import copy
import re
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import yaml
from kmock import KubernetesEmulator, KubernetesError, Server
from kmock._internal import aiobus, enums, rendering

BUILTIN = {
    ("metrics.k8s.io", "nodes"),
    ("", "pods"),
    ("", "services"),
    ("", "nodes"),
    ("", "events"),
    ("", "persistentvolumeclaims"),
    ("", "persistentvolumes"),
    ("storage.k8s.io", "storageclasses"),
    ("", "serviceaccounts"),
    ("batch", "jobs"),
    ("apps", "deployments"),
    ("networking.k8s.io", "networkpolicies"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
}
NS_PATH = re.compile(r"^/api/v1/namespaces/?([^/]*)$")
LOG_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$")
PROXY_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/proxy(/.*)$")
VISIBILITY_GROUP = "/apis/visibility.kueue.x-k8s.io"
VISIBILITY_PATH = re.compile(
    r"^/apis/visibility\.kueue\.x-k8s\.io/(v1\w+)/(?:namespaces/([^/]+)/localqueues|clusterqueues)/([^/]+)"
    r"/pendingworkloads$"
)
KEPT_REQUESTS = 256


def _labels_match(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality-based selectors (a=b, a!=b, a, !a), comma-separated; and ``a in (x,y)``."""
    if not selector:
        return True
    for term in re.split(r",(?![^(]*\))", selector):
        term = term.strip()
        if not term:
            continue
        if m := re.match(r"^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$", term):
            values = {v.strip() for v in m.group(3).split(",")}
            inside = labels.get(m.group(1)) in values
            if inside != (m.group(2) == "in"):
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class PodLog:
    lines: list[bytes]
    rate: float | None = None
    """Lines per second from the first request on; None: all at once."""
    ended: bool = True
    """Whether the container has stopped (a follow ends after the last line)."""
    started: float | None = None
    wall: float = field(default_factory=time.time)
    """When the first line was written, by the node's clock: line i at wall + i / rate."""

    def stamp(self, i: int) -> str:
        """Line i's time as the kubelet writes it with ``timestamps=true`` (RFC 3339, nanoseconds,
        trailing zeros dropped, as Go's RFC3339Nano)."""
        at = self.wall + (i / self.rate if self.rate else 0.0)
        whole = int(at)
        fraction = f"{round((at - whole) * 1e9):09d}".rstrip("0")
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + (f".{fraction}" if fraction else "") + "Z"


class StampingBus(aiobus.Bus):
    """kmock's event bus for one resource, recording each event with a resourceVersion."""

    def __init__(self, owner: ClusterEmulator, resource):
        super().__init__()
        self.owner, self.resource = owner, resource

    async def put(self, *items):
        for item in items:
            await self.owner._record(self.resource, item)
        await super().put(*items)


class _Buses(dict):
    def __init__(self, owner):
        super().__init__()
        self.owner = owner

    def __missing__(self, resource):
        bus = self[resource] = StampingBus(self.owner, resource)
        return bus


class ClusterEmulator(KubernetesEmulator):
    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._buses = _Buses(self)
        self.rv, self.compacted_rv = 1, 0
        self.history: list[Any] = []
        self.object_rv: dict[Any, Any] = {}
        self.changed: asyncio.Condition | None = None
        self.namespaces = {"default"}
        self.pod_logs: dict[tuple[str, str], PodLog] = {}
        self.log_requests: Counter[str] = Counter()
        """Pod-log requests served, by kind: "follow", "since" (a follow resumed from a time), "tail"."""
        self.watch_faults: list[tuple[str, int]] = []
        self.watches = 0
        self.proxied: dict[tuple[str, str, str], str] = {}
        """(namespace, "pod:port", path) -> what the pod proxy answers (e.g. a DCGM exporter's metrics)."""
        self.visibility: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.visibility_versions = ["v1beta2", "v1beta1"]

    # -- resource versions ----------------------------------------------------------

    async def _record(self, resource, event: dict[str, Any]) -> None:
        if self.changed is None:
            self.changed = asyncio.Condition()
        self.rv += 1
        rv = self.rv
        event = copy.deepcopy(event)
        meta = event["object"].setdefault("metadata", {})
        if "namespace" not in meta:  # kmock keeps objects as posted, without it
            for key_resource, namespace, name in self._objects:
                if key_resource == resource and name == meta.get("name") and namespace:
                    meta["namespace"] = namespace
                    break
        meta["resourceVersion"] = str(rv)
        self.object_rv[(resource, meta.get("namespace"), meta.get("name"))] = rv
        self.history.append((rv, resource, event))
        async with self.changed:
            self.changed.notify_all()

    def _matching(self, request: rendering.Request) -> list[dict[str, Any]]:
        selector = request.params.get("labelSelector")
        items = []
        for (resource, namespace, name), obj in self._objects.items():
            if resource != request.resource or obj.deleted:
                continue
            if request.namespace is not None and namespace != request.namespace:
                continue
            raw = copy.deepcopy(obj.raw)
            if not _labels_match(selector, (raw.get("metadata") or {}).get("labels") or {}):
                continue
            raw.setdefault("metadata", {}).setdefault("namespace", namespace) if namespace else None
            rv = self.object_rv.get((resource, namespace, name))
            if rv:
                raw["metadata"]["resourceVersion"] = str(rv)
            items.append(raw)
        return items

    def _event_matches(self, request: rendering.Request, resource, event: dict[str, Any]) -> bool:
        meta = event["object"].get("metadata") or {}
        return (
            resource == request.resource
            and (request.namespace is None or meta.get("namespace", request.namespace) == request.namespace)
            and _labels_match(request.params.get("labelSelector"), meta.get("labels") or {})
        )

    # -- what kmock does differently from the API server ------------------------------

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if request.resource is not None and request.action == enums.action.CREATE and isinstance(request.data, dict):
            meta = request.data.get("metadata")
            if isinstance(meta, dict):
                meta["uid"] = str(uuid.uuid4())  # the API server's, never the client's
        return await super()._handle(request)

    async def _serve_create(self, request: rendering.Request) -> rendering.Payload:
        created = await super()._serve_create(request)
        return rendering.Response(status=201, payload=created)

    def _installed(self, resource) -> bool:
        """Built-in resources always are (kmock knows a resource only once it holds an object of
        it); custom ones once their CustomResourceDefinition exists, as on a real cluster."""
        if (resource.group, resource.plural) in BUILTIN:
            return True
        crd = f"{resource.plural}.{resource.group}"
        return any(
            r.plural == "customresourcedefinitions" and name == crd and not obj.deleted
            for (r, _, name), obj in self._objects.items()
        )

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        if not self._installed(request.resource):
            return await super()._serve_list(request)  # kmock's 404 for an unknown resource
        found = self._matching(request)
        metadata: dict[str, Any] = {"resourceVersion": str(self.rv)}
        limit = request.params.get("limit")
        if limit and limit.isdigit() and int(limit) > 0:  # a page, and where the next starts, as the API server pages
            listed_at, _, place = (request.params.get("continue") or f"{self.rv}:0").partition(":")
            if int(listed_at) < self.compacted_rv:  # the list's version was compacted away: the API server's answer
                # (raised: a returned Response would set the status of every later list)
                raise KubernetesError(410, "Expired", EXPIRED_CONTINUE)
            start = int(place)
            found, rest = found[start : start + int(limit)], found[start + int(limit) :]
            if rest:
                metadata["continue"] = f"{listed_at}:{start + int(limit)}"
                metadata["remainingItemCount"] = len(rest)
        return {"apiVersion": "v1", "kind": "List", "metadata": metadata, "items": found}

    def fail_next_watch(self, how: str, after: int = 0) -> None:
        """The next watch answers 410 Gone ("gone"), or drops after ``after`` events ("cut")."""
        self.watch_faults.append((how, after))

    def compact(self) -> None:
        """Forget the history so far: a watch from an older version gets 410 Gone."""
        self.compacted_rv = self.rv

    async def _serve_watch(self, request: rendering.Request):
        yield b""
        self.watches += 1
        if self.changed is None:
            self.changed = asyncio.Condition()
        fault, after = self.watch_faults.pop(0) if self.watch_faults else (None, 0)
        since_text = request.params.get("resourceVersion") or "0"
        since = int(since_text) if since_text.isdigit() else 0
        if fault == "gone" or (since and since < self.compacted_rv):
            yield {
                "type": "ERROR",
                "object": {
                    "apiVersion": "v1",
                    "kind": "Status",
                    "status": "Failure",
                    "code": 410,
                    "reason": "Expired",
                    "message": f"too old resource version: {since} ({self.__dict__['compacted_rv']})",
                },
            }
            return
        sent = 0
        if since == 0:
            for raw in self._matching(request):
                yield {"type": "ADDED", "object": raw}
                sent += 1
                if fault == "cut" and sent >= after:
                    return
            since = self.rv
        cursor = since
        while True:
            fresh = [(rv, res, ev) for rv, res, ev in self.history if rv > cursor]
            for rv, resource, event in fresh:
                cursor = rv
                if self._event_matches(request, resource, event):
                    yield event
                    sent += 1
                    if fault == "cut" and sent >= after:
                        return
            async with self.changed:
                if self.history and self.history[-1][0] > cursor:
                    continue
                try:
                    await asyncio.wait_for(self.changed.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass

    # -- namespaces and pod logs (paths kmock cannot serve) ----------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw_request.query.get("watch") == "True":  # the official client's spelling; kmock knows "true"
            raw_request = raw_request.clone(rel_url=raw_request.rel_url.update_query(watch="true"))
        if m := NS_PATH.match(raw_request.path):
            return self._serve_namespace(raw_request, m.group(1))
        if (m := LOG_PATH.match(raw_request.path)) and raw_request.method == "GET":
            return await self._serve_log(raw_request, m.group(1), m.group(2))
        if m := PROXY_PATH.match(raw_request.path):
            body = self.proxied.get((m.group(1), m.group(2), m.group(3)))
            if body is None:
                return _status(503, "ServiceUnavailable", "no endpoints available")
            return aiohttp.web.Response(text=body, content_type="text/plain")
        if raw_request.path.rstrip("/") == VISIBILITY_GROUP and self.visibility_versions:
            versions = [
                {"groupVersion": f"visibility.kueue.x-k8s.io/{v}", "version": v} for v in self.visibility_versions
            ]
            return aiohttp.web.json_response(
                {
                    "kind": "APIGroup",
                    "apiVersion": "v1",
                    "name": "visibility.kueue.x-k8s.io",
                    "versions": versions,
                    "preferredVersion": versions[0],
                }  # fmt: skip
            )
        if m := VISIBILITY_PATH.match(raw_request.path):
            pending = self.visibility.get((m.group(2) or "", m.group(3)))  # ("", name): a ClusterQueue's
            if pending is None or m.group(1) not in self.visibility_versions:
                return _status(404, "NotFound", "the server could not find the requested resource")
            return aiohttp.web.json_response({"kind": "PendingWorkloadsSummary", "items": pending})
        if len(self._requests) > 2 * KEPT_REQUESTS:
            del self._requests[:-KEPT_REQUESTS]
        return await super().__call__(raw_request)

    def _serve_namespace(self, raw_request, name: str) -> aiohttp.web.StreamResponse:
        def ns(n):
            return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}, "status": {"phase": "Active"}}

        if not name:
            return aiohttp.web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "NamespaceList",
                    "metadata": {},
                    "items": [ns(n) for n in sorted(self.namespaces)],
                }
            )
        if name in self.namespaces:
            return aiohttp.web.json_response(ns(name))
        return _status(404, "NotFound", f'namespaces "{name}" not found')

    def script_log(
        self, namespace: str, pod: str, lines: list[str], rate: float | None = None, ended: bool = True
    ) -> None:
        self.pod_logs[(namespace, pod)] = PodLog([(line + "\n").encode() for line in lines], rate, ended)

    async def _serve_log(self, raw_request, namespace: str, pod: str) -> aiohttp.web.StreamResponse:
        log: PodLog | None = self.pod_logs.get((namespace, pod))
        if log is None:
            return _status(
                400, "BadRequest", f'container "pytorch" in pod "{pod}" is waiting to start: ContainerCreating'
            )
        follow = raw_request.query.get("follow") == "true"
        stamps = raw_request.query.get("timestamps") == "true"
        since = raw_request.query.get("sinceTime")
        tail = raw_request.query.get("tailLines")
        self.log_requests["since" if since else "tail" if tail else "follow" if follow else "whole"] += 1
        if log.started is None:
            log.started, log.wall = time.monotonic(), time.time()
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
        await response.prepare(raw_request)
        i = 0
        try:
            while True:
                due = (
                    len(log.lines)
                    if log.rate is None
                    else min(len(log.lines), int((time.monotonic() - log.started) * log.rate) + 1)
                )
                if tail is not None:  # the kubelet starts that many lines from the end, then follows
                    i, tail = max(0, due - int(tail)), None
                if due > i:
                    chunk = []
                    for n in range(i, due):
                        stamp = log.stamp(n)
                        if since and _stamp_seconds(stamp) < _stamp_seconds(since):
                            continue  # the kubelet sends lines from sinceTime on (second precision)
                        chunk.append(stamp.encode() + b" " + log.lines[n] if stamps else log.lines[n])
                    await response.write(b"".join(chunk))
                    i = due
                if not follow or (i >= len(log.lines) and log.ended):
                    break
                await asyncio.sleep(0.05 if log.rate is None else max(0.005, 1.0 / log.rate))
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        return response


def _stamp_seconds(stamp: str) -> str:
    return stamp[:19]


EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)
"""What the API server answers (410, reason Expired) a continue token whose list version etcd has
compacted away (k8s.io/apiserver's storage: ``NewResourceExpired`` with this message)."""


def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
    return aiohttp.web.json_response(
        {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": message,
        },
        status=code,
    )


@dataclass
class RunningCluster:
    """The emulator on its own thread, and a kubeconfig that points at it. Two API servers
    serve the one emulator (as an EKS control plane runs several behind one endpoint):
    ``kubeconfig`` reaches the one torchdeck uses, which a test can kill and bring back on the
    same port (``kill_api``, ``revive_api``); ``side_kubeconfig`` the other, which stays up, for
    what the operator and the kubelet change meanwhile."""

    kubeconfig: Path
    url: str
    emulator: ClusterEmulator
    loop: asyncio.AbstractEventLoop
    _stop: Any = field(repr=False, default=None)
    side_kubeconfig: Path | None = None
    _control: Any = field(repr=False, default=None)

    def call(self, fn, *args, **kwargs):
        """Run ``fn`` on the emulator's loop (its state is not thread-safe)."""

        async def run():
            result = fn(*args, **kwargs)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def kill_api(self) -> None:
        """The API server dies: every open connection (watches, log streams) is cut at once and
        its port refuses new ones, until ``revive_api``."""
        asyncio.run_coroutine_threadsafe(self._control.put("kill"), self.loop).result(10)
        asyncio.run_coroutine_threadsafe(self._control.join(), self.loop).result(10)

    def revive_api(self) -> None:
        """The API server is back, on the same port, with the cluster's state as it is now."""
        asyncio.run_coroutine_threadsafe(self._control.put("revive"), self.loop).result(10)
        asyncio.run_coroutine_threadsafe(self._control.join(), self.loop).result(10)


def _kubeconfig(path: Path, url: str, context: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": context,
                "clusters": [{"name": "kmock", "cluster": {"server": url}}],
                "users": [{"name": "tester", "user": {"token": "test-token"}}],
                "contexts": [
                    {"name": context, "context": {"cluster": "kmock", "user": "tester", "namespace": "default"}}
                ],
            }
        )
    )
    return path


def _cut_every_connection(server: Server) -> None:
    """What a killed process leaves: its sockets closed under the clients, mid-response."""
    for handler in list(server.server.runner.server.connections):
        if handler.transport is not None:
            handler.transport.abort()


def start_cluster(tmp_path: Path, context: str = "kmock") -> tuple[RunningCluster, threading.Thread]:
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        control: asyncio.Queue[str] = asyncio.Queue()
        stop = asyncio.Event()
        async with ClusterEmulator() as emulator, Server(emulator) as side:
            port = None
            while True:
                async with Server(emulator, port=port) as server:
                    port = server.port
                    if not started.is_set():
                        holder.update(
                            emulator=emulator,
                            url=str(server.url).rstrip("/"),
                            side=str(side.url).rstrip("/"),
                            loop=asyncio.get_running_loop(),
                            stop=stop,
                            control=control,
                        )
                        started.set()
                    else:
                        control.task_done()  # revived
                    what = await _next(control, stop)
                    if what == "kill":
                        _cut_every_connection(server)
                if what != "kill":
                    return
                control.task_done()  # killed: the port refuses until revived
                if await _next(control, stop) != "revive":
                    return

    thread = threading.Thread(target=lambda: asyncio.run(serve()), name="kmock", daemon=True)
    thread.start()
    if not started.wait(20):
        raise RuntimeError("kmock did not start")
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", holder["url"], context)
    side = _kubeconfig(tmp_path / "kubeconfig-side", holder["side"], context)
    cluster = RunningCluster(
        kubeconfig, holder["url"], holder["emulator"], holder["loop"], holder["stop"], side, holder["control"]
    )
    return cluster, thread


async def _next(control: asyncio.Queue, stop: asyncio.Event) -> str:
    """The next command for the API server, or "stop"."""
    get, stopped = asyncio.ensure_future(control.get()), asyncio.ensure_future(stop.wait())
    await asyncio.wait({get, stopped}, return_when=asyncio.FIRST_COMPLETED)
    for task in (get, stopped):
        if not task.done():
            task.cancel()
    return get.result() if get.done() and not get.cancelled() else "stop"


def stop_cluster(cluster: RunningCluster, thread: threading.Thread) -> None:
    cluster.loop.call_soon_threadsafe(cluster._stop.set)
    thread.join(10)


def running_cluster(tmp_path: Path, *namespaces: str):
    """A pytest fixture's body: the emulator running (with these namespaces) until the test ends."""
    running, thread = start_cluster(tmp_path)
    running.emulator.namespaces.update(namespaces)
    yield running
    stop_cluster(running, thread)
