"""Issue 42: rank 0 reports its progress to Kubeflow Trainer's status server where the Trainer gave
the pod one (``KUBEFLOW_TRAINER_SERVER_URL`` and its token file): the body is the Trainer's
UpdateTrainJobStatusRequest, the posts never block the rank, and nothing is posted without the
variables or from another rank. The real controller's answer is tested on the real cluster.
Issue 51: the token goes over TLS only, to the URL the pod was given, and never follows a redirect."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from torchdeck.trainer.kubeflow_status import Progress, TrainerStatus, status_body


def test_the_body_is_the_trainers_update_request() -> None:
    body = status_body(5, 20, 31.7, {"loss": 0.52}, now=0.0)
    assert body == {
        "trainerStatus": {
            "lastUpdatedTime": "1970-01-01T00:00:00Z",
            "progressPercentage": 25,
            "estimatedRemainingSeconds": 31,
            "metrics": [{"name": "step", "value": "5"}, {"name": "loss", "value": "0.52"}],
        }
    }


def test_progress_reads_the_total_from_the_start_and_the_pace_from_the_steps() -> None:
    progress = Progress()
    progress.feed({"event": "start", "total_steps": 10}, now=100.0)
    progress.feed({"event": "step", "step": 2, "loss": 1.5}, now=100.0)
    progress.feed({"event": "step", "step": 4, "loss": 1.2}, now=104.0)  # 2 s a step
    assert progress.remaining_s() == 12.0
    body: Any = progress.body(104.0)["trainerStatus"]
    assert body["progressPercentage"] == 40 and body["estimatedRemainingSeconds"] == 12
    progress.feed({"event": "done"}, now=110.0)
    done: Any = progress.body(110.0)["trainerStatus"]
    assert done["progressPercentage"] == 100


class Server:
    """An HTTPS server on 127.0.0.1 (a certificate of its own, made here) that keeps what is posted to
    it, as the status server takes it; ``redirect``: it answers 307 to that URL instead."""

    def __init__(self, folder: Path, redirect: str = "") -> None:
        self.posts: list[tuple[str, str, dict]] = []
        self.ca = folder / "server.crt"
        key = folder / "server.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(self.ca)],
            check=True, capture_output=True,
        )  # fmt: skip
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers["Content-Length"])
                owner.posts.append((self.path, self.headers["Authorization"], json.loads(self.rfile.read(length))))
                if redirect:
                    self.send_response(307)
                    self.send_header("Location", redirect)
                    self.end_headers()
                    return
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"

    def env(self, path: str, token: Path) -> dict[str, str]:
        return {
            "KUBEFLOW_TRAINER_SERVER_URL": self.url + path,
            "KUBEFLOW_TRAINER_SERVER_TOKEN": str(token),
            "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(self.ca),
        }


def test_rank_0_posts_its_progress_with_its_token_and_the_last_at_once(tmp_path: Path) -> None:
    server = Server(tmp_path)
    (tmp_path / "token").write_text("secret-token\n")
    path = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/e2e/trainjobs/run-1/status"
    env = server.env(path, tmp_path / "token")
    status = TrainerStatus(env, rank=0)
    status.feed({"event": "start", "total_steps": 8})
    for step in range(1, 9):
        status.feed({"event": "step", "step": step, "loss": 2.0 / step})
    status.feed({"event": "done"})
    server.httpd.shutdown()
    assert server.posts, "nothing was posted"
    where, token, last = server.posts[-1]
    assert where == path and token == "Bearer secret-token"
    assert last["trainerStatus"]["progressPercentage"] == 100
    assert {"name": "step", "value": "8"} in last["trainerStatus"]["metrics"]
    assert len(server.posts) <= 3  # at most one every EVERY_S, and the last


def test_nothing_is_posted_without_the_trainers_variables_or_from_another_rank(tmp_path: Path) -> None:
    server = Server(tmp_path)
    (tmp_path / "token").write_text("t")
    env = server.env("/x", tmp_path / "token")
    for status in (TrainerStatus({}, rank=0), TrainerStatus(env, rank=1)):
        status.feed({"event": "step", "step": 1, "total_steps": 1})
        status.feed({"event": "done"})
    server.httpd.shutdown()
    assert server.posts == []


def test_a_refusing_server_is_said_once_and_training_goes_on(tmp_path: Path, capsys) -> None:
    env = {
        "KUBEFLOW_TRAINER_SERVER_URL": "https://127.0.0.1:9/x",
        "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "none"),
    }
    status = TrainerStatus(env, rank=0)
    status.feed({"event": "step", "step": 1, "total_steps": 2})
    status.feed({"event": "done"})
    status.close()
    assert capsys.readouterr().err.count("status server did not take the progress") == 1


def test_status_prints_the_trainers_own_line() -> None:
    from torchdeck.cli.jobs import trainer_status_words

    said: Any = status_body(10, 10, 0, {"loss": 0.52}, now=0.0)["trainerStatus"]
    line = trainer_status_words(said)
    assert line == "100% done, 0 s left, step=10 loss=0.52 (updated 1970-01-01T00:00:00Z)"


def test_the_token_goes_over_tls_only_and_follows_no_redirect(tmp_path: Path, capsys) -> None:
    """A status URL that is not https:// is refused before the token file is read; a server that
    answers 307 (elsewhere) gets the one post, and the token is not sent to where it points."""
    (tmp_path / "token").write_text("secret-token")
    plain = TrainerStatus({"KUBEFLOW_TRAINER_SERVER_URL": "http://127.0.0.1:9/x",
                           "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "token")}, rank=0)  # fmt: skip
    plain.feed({"event": "step", "step": 1, "total_steps": 2})
    plain.close()
    assert "is not an https:// URL: the token is sent over TLS only" in capsys.readouterr().err

    (tmp_path / "elsewhere").mkdir()
    elsewhere = Server(tmp_path / "elsewhere")
    server = Server(tmp_path, redirect=elsewhere.url + "/stolen")
    status = TrainerStatus({**server.env("/x", tmp_path / "token"), "KUBEFLOW_TRAINER_SERVER_CA_CERT": ""}, rank=0)
    status.feed({"event": "step", "step": 1, "total_steps": 2})
    status.close()
    status = TrainerStatus(server.env("/x", tmp_path / "token"), rank=0)
    status.feed({"event": "step", "step": 1, "total_steps": 2})
    status.close()
    server.httpd.shutdown()
    elsewhere.httpd.shutdown()
    assert [where for where, _, _ in server.posts] == ["/x"]  # (the first, without its CA, never connected)
    assert elsewhere.posts == []
    assert "answered 307" in capsys.readouterr().err
