"""The one way torchdeck talks to a Kubernetes API server: a connection
from a kubeconfig context (``KubeClient``), every API path built from one
table keyed by kind (``api_path``), the API's failures as the project's
errors, and its quantities as numbers. Reads go through urllib3 with what the
official client resolved from the kubeconfig in a child process (``resolve.py``);
the client itself is imported for the first write, never before."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from ..errors import BackendError
from .objects import LISTED_AGAIN, Api, Event, Node, ObjectMeta, Pod, as_map, items, read_pages
from .resolve import Resolved

LIST_PAGE = 100
"""Objects a list request asks for at a time (``list_pages``): 1,024 pods are ten megabytes of JSON,
which read whole held about 100 MB of the console's memory at once."""
NODES_ONE_BY_ONE = 16
"""Nodes read one request each at most; more are read in one list request (``nodes_named``),"""
NODES_LISTED_S = 5.0
"""kept this long: a monitor reads its run's nodes for its status and for their figures, each a
second or two, and 1,000 nodes are a few megabytes (a node's state is news within its kubelet's
40 s grace anyway)."""

if TYPE_CHECKING:
    from kubernetes.client import ApiClient
    from urllib3 import PoolManager
    from urllib3.response import BaseHTTPResponse


GZIP = {"Accept-Encoding": "gzip"}
"""Asked for on every GET but a stream's, on both of the client's paths (see ``_get``)."""


class ApiError(BackendError):
    """The API server answered with an error status."""

    def __init__(self, message: str, hint: str = "", status: int = 0, reason: str = ""):
        super().__init__(message, hint)
        self.status, self.reason = status, reason

    @classmethod
    def from_exception(cls, exc: object) -> ApiError:
        """The error of an answer with an error status: the client's ApiException, or ``_Answer``."""
        status = getattr(exc, "status", 0) or 0
        message, reason = "", getattr(exc, "reason", "") or ""
        try:
            body = json.loads(getattr(exc, "body", None) or "{}")
            message, reason = body.get("message") or "", body.get("reason") or reason
        except (TypeError, ValueError, AttributeError):
            pass
        hints = {
            401: "your credentials expired or are wrong: refresh the kubeconfig (aws eks update-kubeconfig)",
            403: "your identity lacks the RBAC permission for this; ask a cluster admin",
            404: "",
            409: "an object with that name exists already",
            410: "",
            422: "the cluster refused the manifest: torchdeck render --validate shows what is wrong",
        }
        return cls(f"the cluster said {status} {reason}: {message}".rstrip(": "), hints.get(status, ""), status, reason)


@dataclass
class _Answer:
    """An error status as ``ApiError.from_exception`` reads one (the client's ApiException has these)."""

    status: int
    reason: str
    body: bytes


class Unreachable(BackendError):
    """No answer from the API server (network, DNS, TLS, timeout)."""


def quantity(text: object) -> float:
    """A Kubernetes quantity as a number: "3500m" -> 3.5, "8Gi" -> 8589934592, "2" -> 2; 0.0 for
    anything that is no finite number ("NaN", "1e999", junk)."""
    value = _quantity(text)
    return value if math.isfinite(value) else 0.0


def _quantity(text: object) -> float:
    """A Kubernetes quantity as a number: "3500m" -> 3.5, "8Gi" -> 8589934592, "2" -> 2."""
    text = str(text).strip()
    units = {
        "n": 1e-9,
        "u": 1e-6,
        "m": 1e-3,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
    }
    for suffix in ("Ki", "Mi", "Gi", "Ti", "n", "u", "m", "k", "M", "G", "T"):
        if text.endswith(suffix):
            try:
                return float(text[: -len(suffix)]) * units[suffix]
            except ValueError:
                return 0.0
    try:
        return float(text)
    except ValueError:
        return 0.0


# -- where each kind lives --------------------------------------------------------------


@dataclass(frozen=True)
class ApiKind:
    """Where the API server keeps one kind: its group/version base, its plural, namespaced or not."""

    base: str
    plural: str
    namespaced: bool = True

    @classmethod
    def of_group(cls, group: str, version: str, plural: str, namespaced: bool = True) -> ApiKind:
        return cls("api/v1" if group == "" else f"apis/{group}/{version}", plural, namespaced)


KINDS: dict[str, ApiKind] = {
    "Namespace": ApiKind("api/v1", "namespaces", namespaced=False),
    "Node": ApiKind("api/v1", "nodes", namespaced=False),
    "Pod": ApiKind("api/v1", "pods"),
    "Event": ApiKind("api/v1", "events"),
    "Service": ApiKind("api/v1", "services"),
    "ServiceAccount": ApiKind("api/v1", "serviceaccounts"),
    "ConfigMap": ApiKind("api/v1", "configmaps"),
    "PersistentVolumeClaim": ApiKind("api/v1", "persistentvolumeclaims"),
    "PersistentVolume": ApiKind("api/v1", "persistentvolumes", namespaced=False),
    "StorageClass": ApiKind("apis/storage.k8s.io/v1", "storageclasses", namespaced=False),
    "DaemonSet": ApiKind("apis/apps/v1", "daemonsets"),
    "Deployment": ApiKind("apis/apps/v1", "deployments"),
    "NetworkPolicy": ApiKind("apis/networking.k8s.io/v1", "networkpolicies"),
    "Job": ApiKind("apis/batch/v1", "jobs"),
    "CustomResourceDefinition": ApiKind("apis/apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False),
    "NodeMetrics": ApiKind("apis/metrics.k8s.io/v1beta1", "nodes", namespaced=False),
}
"""Every built-in kind torchdeck reads or writes; the training operators' kinds come from
``kinds.JOB_KINDS`` (``JobKind.api``)."""


def _segment(text: str) -> str:
    """One path segment, quoted: a name read from a cluster or a run (a pod's, a node's) can hold
    '/', '?', '#' or '%', and must not reach another path than its own."""
    if text in (".", ".."):
        raise BackendError(f"{text!r} is not a name an API path can hold", "names are letters, digits, '-' and '.'")
    return quote(text, safe=":")


def api_path(kind: str | ApiKind, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    """The path of a collection (no ``name``), of one object, or of its subresource (``sub``: log,
    status, proxy/...). ``namespace`` None on a namespaced kind means every namespace. Every
    segment is quoted, the subresource's each on its own."""
    api = KINDS[kind] if isinstance(kind, str) else kind
    path = api.base + (f"/namespaces/{_segment(namespace)}" if api.namespaced and namespace else "") + "/" + api.plural
    if name:
        path += "/" + _segment(name)
        if sub:
            path += "/" + "/".join(_segment(part) for part in sub.split("/"))
    return path


def object_path(obj: Mapping[str, object]) -> str:
    """The API path of one built-in object (its collection, then its name)."""
    meta = ObjectMeta.from_api(obj)
    return api_path(str(obj["kind"]), meta.namespace or "default", meta.name)


# -- the connection ------------------------------------------------------------------


class KubeClient:
    """A connection to one kubeconfig context (default: the file's current one). Picklable: a copy
    in another process opens its own connection (see ``Resolved``)."""

    def __init__(self, kubeconfig: str | Path | None = None, context: str | None = None):
        self.kubeconfig = str(kubeconfig) if kubeconfig else None
        self.context = context
        self.context_namespace: str | None = None
        """The context's namespace, once connected (default: "default")."""
        self._api: ApiClient | None = None
        self._resolved: Resolved | None = None
        self._pool: PoolManager | None = None
        self._resolving = threading.Lock()
        self._nodes_listed: tuple[float, dict[str, Node]] = (0.0, {})
        """When every node was last listed by ``nodes_named``, and what it said."""
        """One resolver at a time: the console's workers all read at once when it opens."""

    def __getstate__(self) -> dict[str, object]:
        resolved = self._resolved
        if self._api is not None:
            resolved = Resolved.of(self._api.configuration)  # its token renewed if it had expired
        elif resolved is None:
            try:  # resolve here, once: the copy then starts reading at once
                resolved = self._resolve(None)
            except BackendError:
                pass  # the copy's first request says what is wrong with the kubeconfig
        return {
            **self.__dict__,
            "_api": None,
            "_pool": None,
            "_resolved": resolved,
            "_resolving": None,
            "_nodes_listed": (0.0, {}),
        }

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state, _resolving=threading.Lock())

    @property
    def api(self) -> ApiClient:
        """The official client's ApiClient, made on first use."""
        if self._api is None:
            from kubernetes import client

            from .resolve import load_config

            cfg, namespace = load_config(self.kubeconfig, self.context)
            cfg.connection_pool_maxsize = 512  # a stream per pod: 64 workers are 64 connections
            cfg.retries = 0
            self._api = client.ApiClient(cfg)
            if self.context_namespace is None:
                self.context_namespace = namespace
        return self._api

    @property
    def server(self) -> str:
        """The API server's URL (what names the cluster in torchdeck's records of what it made)."""
        resolved = self._resolved or self._resolve(None)
        return resolved.host

    def current_context(self) -> str:
        """The context's name: the one asked for, else the kubeconfig's current one ('' without one)."""
        if self.context:
            return self.context
        try:
            from kubernetes import config

            from .resolve import check_kubeconfig_files

            check_kubeconfig_files(self.kubeconfig)
            return str(config.list_kube_config_contexts(config_file=self.kubeconfig)[1]["name"])
        except Exception:  # no kubeconfig: a request says so, with its hint
            return ""

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        query: Mapping[str, object] | None = None,
        stream: bool = False,
        timeout: float | None = 30,
    ) -> Any:
        """One API call; SDK and network errors become BackendError (ApiError for HTTP statuses). Its
        answer: the streamed response (``stream``), else the parsed JSON, which the typed readers
        below (and ``objects.py``'s views) read."""
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        if method == "GET" and self._api is None:
            used = self._resolved
            if used is None:
                used = self._resolve(None)
            try:
                got = self._get(path, params, timeout, compressed=not stream)
            except ApiError as exc:
                if exc.status != 401:
                    raise
                self._resolve(used)  # the token expired: the kubeconfig's credential command gives another
                got = self._get(path, params, timeout, compressed=not stream)
            if stream:
                return got
            data = got.data
            return orjson.loads(data) if data else {}
        from kubernetes.client import ApiException

        try:
            response = self.api.call_api(
                "/" + path.lstrip("/"),
                method,
                query_params=params,
                body=body,
                # the API server takes a PATCH only with a patch type: a JSON merge patch here
                header_params={
                    "Accept": "application/json",
                    "Content-Type": "application/merge-patch+json" if method == "PATCH" else "application/json",
                    **(GZIP if method == "GET" and not stream else {}),  # as _get asks (urllib3 decodes .data)
                },
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=timeout,
            )
        except ApiException as exc:
            raise ApiError.from_exception(exc) from None
        except BackendError:
            raise  # the kubeconfig's own one line
        except Exception as exc:  # urllib3's connection errors, timeouts
            raise Unreachable(
                f"cannot reach the cluster: {type(exc).__name__}: {str(exc)[:200]}",
                "check the network and the kubeconfig (kubectl cluster-info)",
            ) from None
        if stream:
            return response
        data = response.data
        return orjson.loads(data) if data else {}

    def _resolve(self, stale: Resolved | None) -> Resolved:
        """Resolve the kubeconfig, unless another thread has since replaced ``stale``."""
        with self._resolving:
            if self._resolved is stale:
                resolved, namespace = Resolved.load(self.kubeconfig, self.context)
                self._resolved, self._pool = resolved, None
                if self.context_namespace is None:
                    self.context_namespace = namespace
            assert self._resolved is not None
            return self._resolved

    def _get(
        self, path: str, params: list[tuple[str, object]], timeout: float | None, compressed: bool = False
    ) -> BaseHTTPResponse:
        """A GET with urllib3 alone, as ``Resolved`` says (the same answers as through the client),
        its body not read yet; ``compressed``: gzip accepted, as client-go asks by default (the API
        server compresses an answer over 128 KiB: a list of 1,000 nodes' 12 MB comes in a tenth of
        that, and is read in fewer chunks). Streams (logs) are not: a followed log would wait in
        the compressor's buffer."""
        from urllib.parse import urlencode

        import urllib3

        assert self._resolved is not None
        if self._pool is None:
            self._pool = self._resolved.pool()
        url = self._resolved.host + "/" + path.lstrip("/") + ("?" + urlencode(params) if params else "")
        try:
            response = self._pool.request(
                "GET",
                url,
                headers={
                    "Accept": "application/json",
                    **(GZIP if compressed else {}),
                    **dict(self._resolved.headers),
                },
                preload_content=False,
                timeout=urllib3.Timeout(total=timeout) if timeout else None,
            )
        except Exception as exc:  # urllib3's connection errors, timeouts
            raise Unreachable(
                f"cannot reach the cluster: {type(exc).__name__}: {str(exc)[:200]}",
                "check the network and the kubeconfig (kubectl cluster-info)",
            ) from None
        if response.status >= 400:
            body = response.data
            response.release_conn()
            raise ApiError.from_exception(_Answer(response.status, response.reason or "", body))
        return response

    def list_pages(self, path: str, query: Mapping[str, object] | None = None) -> Iterator[Api]:
        """A list request's answer a page at a time (``limit``, then ``continue``, as ``kubectl``
        pages its lists): each page can be read into views and let go before the next comes
        (``read_pages``). Where the continue token has expired (410: the API server keeps a list's
        version a few minutes), the list is read again whole, as client-go's pager does, in a page
        marked ``LISTED_AGAIN``."""
        token: str | None = None
        while True:
            try:
                page = self.request("GET", path, query={**(query or {}), "limit": LIST_PAGE, "continue": token})
            except ApiError as exc:
                if exc.status != 410 or token is None:
                    raise
                yield {**self.request("GET", path, query=query), LISTED_AGAIN: True}
                return
            yield page
            more = as_map(as_map(page).get("metadata")).get("continue")
            if not isinstance(more, str) or not more:
                return
            token = more

    def read_pods(self, namespace: str | None, selector: str) -> list[Pod]:
        """The pods that match a label selector, in ``namespace`` (None: in every one)."""
        return read_pages(self.list_pages(api_path("Pod", namespace), {"labelSelector": selector}), Pod.from_api)

    def read_nodes(self) -> list[Node]:
        """Every node of the cluster."""
        return read_pages(self.list_pages(api_path("Node")), Node.from_api)

    def read_node(self, name: str) -> Node:
        """One node (ApiError 404 where it is gone)."""
        return Node.from_api(self.request("GET", api_path("Node", name=name)))

    def nodes_named(self, names: Iterable[str]) -> tuple[dict[str, Node | None], list[str]]:
        """The named nodes (None: no such node now), and those this identity may not read. A GET
        each for up to ``NODES_ONE_BY_ONE``; for more, one LIST of every node, kept ``NODES_LISTED_S``
        (listed again for a name it lacks): a run of 1,024 pods on 500 nodes asks once, not 500 times.
        An identity that may get nodes but not list them reads them one by one."""
        wanted = sorted({name for name in names if name})
        if len(wanted) > NODES_ONE_BY_ONE:
            when, listed = self._nodes_listed
            kept = bool(when) and time.monotonic() - when <= NODES_LISTED_S
            if not kept or any(name not in listed for name in wanted):  # (a node newer than the list kept)
                try:
                    listed = {node.name: node for node in self.read_nodes()}
                    self._nodes_listed = (time.monotonic(), listed)
                except ApiError:  # not this identity's to list (a role that may get them): one by one
                    listed = {}
            if listed:
                return {name: listed.get(name) for name in wanted}, []
        found: dict[str, Node | None] = {}
        unread = []
        for name in wanted:
            try:
                found[name] = self.read_node(name)
            except ApiError as exc:
                if exc.status == 404:
                    found[name] = None
                else:
                    unread.append(name)
        return found, unread

    def read_events(self, namespace: str, about: str) -> list[Event]:
        """The events about the object named ``about`` in ``namespace``."""
        answer = self.request(
            "GET", api_path("Event", namespace), query={"fieldSelector": f"involvedObject.name={about}"}
        )
        return [Event.from_api(e) for e in items(answer)]

    def exists(self, path: str) -> bool:
        """GET answers (True) or says 404 (False); any other failure is raised."""
        try:
            self.request("GET", path)
            return True
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise


def ensure_object(kube: KubeClient, obj: Mapping[str, object]) -> bool:
    """Create a built-in object, or merge-patch it where it is; True if made now."""
    path = object_path(obj)
    try:
        kube.request("POST", path.rsplit("/", 1)[0], body=obj)
        return True
    except ApiError as exc:
        if exc.status != 409:
            raise
    kube.request("PATCH", path, body=obj)
    return False
