"""How the metric reader reads a cluster: its copy of the backend talks to the API with urllib3
and what the official client resolved from the kubeconfig (client.Resolved), without loading the
client; log bodies are read straight from the socket (streams._dechunked). Checked against what
the official client does with the same requests, on kmock (kube_cluster.py)."""

from __future__ import annotations

import http.server
import json
import pickle
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchdeck.backends.kubernetes.client import ApiError, KubeClient, api_path
from torchdeck.backends.kubernetes.streams import _dechunked

NS = "training"


class Pieces:
    """A socket file that hands out these pieces, one per read."""

    def __init__(self, pieces: list[bytes]):
        self.pieces = list(pieces)

    def read1(self, n: int = -1, /) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


def chunked(parts: list[bytes], extension: bool) -> bytes:
    """The body as a server sends it chunked (with a chunk extension, and a trailer, as HTTP allows)."""
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(p), b";name=v" if extension else b"", p) for p in parts if p)
    return body + b"0\r\nx-trailer: 1\r\n\r\n"


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.binary(max_size=300), max_size=12),
    cuts=st.lists(st.integers(0, 5000), max_size=20),
    extension=st.booleans(),
)
def test_a_chunked_body_comes_out_whole_however_the_reads_cut_it(parts, cuts, extension):
    wire = chunked(parts, extension)
    bounds = sorted({c % (len(wire) + 1) for c in cuts} | {0, len(wire)})
    pieces = [wire[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
    out = list(_dechunked(Pieces(pieces)))
    assert b"".join(out) == b"".join(parts)
    assert all(out)  # nothing empty is handed on


def test_chunks_that_arrived_together_come_out_as_one_piece_and_the_stream_stops_at_the_last():
    wire = chunked([b"a\n", b"b\n", b"c\n"], False) + b"junk after the body"
    assert list(_dechunked(Pieces([wire]))) == [b"a\nb\nc\n"]
    # a connection cut mid-chunk: what was whole is handed on, then it says it was cut (and the
    # log is asked for again from there: test_faults.py)
    stream = _dechunked(Pieces([b"2\r\na\n\r\n5\r\nhal"]))
    assert next(stream) == b"a\n"
    with pytest.raises(ConnectionError):
        next(stream)


CHILD = textwrap.dedent(
    """
    import json, pickle, sys
    from torchdeck.backends.kubernetes.client import ApiError, api_path
    from torchdeck.backends.kubernetes.streams import _line_chunks
    client = pickle.loads(sys.stdin.buffer.read())
    pods = client.request("GET", api_path("Pod", "training"))
    log = client.request("GET", api_path("Pod", "training", "p-0", "log"), query={"timestamps": "true"}, stream=True)
    lines = [line.decode() for chunk in _line_chunks(log) for line in chunk]
    try:
        client.request("GET", api_path("Pod", "training", "nowhere"))
        missing = None
    except ApiError as exc:
        missing = [exc.status, exc.message, exc.hint]
    print(json.dumps({"pods": [p["metadata"]["name"] for p in pods["items"]], "lines": lines,
                      "missing": missing, "client_loaded": "kubernetes" in sys.modules}))
    """
)


def test_the_readers_copy_answers_as_the_official_client_does_without_loading_it(kube_api):
    """What the console's copy of the connection gets in another process (as the metric reader
    does): the same pods, the same log (stamped, one chunk a line), the same one-line 404, and the
    official client is never imported there (57 MB of the reader's memory)."""
    client = KubeClient(kube_api.kubeconfig)
    client.request(
        "POST",
        api_path("Pod", NS),
        body={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-0"}, "spec": {"containers": []}},
    )
    kube_api.call(kube_api.emulator.script_log, NS, "p-0", [f"line {i}" for i in range(50)])
    done = subprocess.run(
        [sys.executable, "-c", CHILD], input=pickle.dumps(client), capture_output=True, timeout=60, check=True
    )
    child = json.loads(done.stdout)
    assert child["client_loaded"] is False
    assert child["pods"] == [p["metadata"]["name"] for p in client.request("GET", api_path("Pod", NS))["items"]]
    assert [line.split(" ", 1)[1] for line in child["lines"]] == [f"line {i}" for i in range(50)]
    assert all(line[:4].isdigit() and line.split(" ", 1)[0].endswith("Z") for line in child["lines"])
    with pytest.raises(ApiError) as official:
        client.request("GET", api_path("Pod", NS, "nowhere"))
    assert child["missing"] == [official.value.status, official.value.message, official.value.hint]
    assert official.value.status == 404


def test_an_expired_token_is_renewed_by_the_kubeconfigs_credential_command(tmp_path):
    """A 401 to a read (EKS tokens last 15 minutes) runs the kubeconfig's credential command
    again, as the official client would (an exec plugin, as `aws eks update-kubeconfig` writes),
    and the read is made again with the new token: the caller never sees the 401, and the
    official client is not loaded in the process that reads."""
    seen: list[str] = []

    class OnlyTheNewToken(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("authorization", ""))
            ok = self.headers.get("authorization") == "Bearer token-2"
            body = json.dumps(
                {"kind": "PodList", "items": [{"metadata": {"name": "p-0"}}]}
                if ok
                else {"kind": "Status", "status": "Failure", "reason": "Unauthorized", "code": 401}
            )
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OnlyTheNewToken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    counter = tmp_path / "issued"
    plugin = tmp_path / "credential.py"
    plugin.write_text(
        "import json, pathlib\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', 'kind': 'ExecCredential',"
        " 'status': {'token': f'token-{n}'}}))\n"
    )
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "c",
                    "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                    "users": [
                        {
                            "name": "u",
                            "user": {
                                "exec": {
                                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                                    "command": sys.executable,
                                    "args": [str(plugin)],
                                    "interactiveMode": "Never",
                                }
                            },
                        }
                    ],
                    "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                }
            )
        )
        copy = pickle.loads(pickle.dumps(KubeClient(kubeconfig)))  # resolved once: token-1
        pods = copy.request("GET", api_path("Pod", NS))
        assert [p["metadata"]["name"] for p in pods["items"]] == ["p-0"]
        assert seen == ["Bearer token-1", "Bearer token-2"]
        assert copy._api is None
    finally:
        server.shutdown()


@pytest.mark.slow
def test_sixty_four_pods_logs_are_read_in_full_by_a_few_threads(kube_api):
    """Every pod's log followed at once as its lines are written, each line once and in order,
    while the follower holds a fixed number of threads (its openers, its reader and its pod
    watch), not one a pod; it ends when the pods have finished and their logs are read."""
    from kube_jobs import install, make_pod, make_spec, set_phase

    from torchdeck.backends.kubernetes.backend import KubernetesBackend
    from torchdeck.backends.kubernetes.streams import OPENERS, PodLogFollower

    kube_backend = KubernetesBackend(kube_api.kubeconfig)
    install(kube_backend)
    run_id = kube_backend.submit(make_spec(nodes=64))
    pods, lines = 64, 40
    names = [f"{run_id}-worker-{i}" for i in range(pods)]
    for i, name in enumerate(names):
        kube_api.call(kube_api.emulator.script_log, NS, name, [f"pod {i} line {n}" for n in range(lines)], rate=40)
        make_pod(kube_backend, run_id, name, "worker", i)
    before = threading.active_count()
    follower = PodLogFollower(kube_backend.client, kube_backend.pod_selector(run_id), run_id, NS, follow=True)
    follower.start()
    got: dict[int, list[str]] = {}
    most, done, finished = 0, False, False
    try:
        deadline = time.monotonic() + 90
        while not done and time.monotonic() < deadline:
            batch, done = follower.take(0.2)
            most = max(most, threading.active_count() - before)
            for rank, _, line in batch:
                got.setdefault(rank, []).append(line.decode())
            if not finished and sum(map(len, got.values())) == pods * lines:
                for name in names:
                    set_phase(kube_backend, name, "Succeeded")
                finished = True
    finally:
        follower.stop()
    assert done and finished
    assert got == {i: [f"pod {i} line {n}" for n in range(lines)] for i in range(pods)}
    assert most <= OPENERS + 2, most
