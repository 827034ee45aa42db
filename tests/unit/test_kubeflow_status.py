"""Issue 42: rank 0 reports its progress to Kubeflow Trainer's status server where the Trainer gave
the pod one (``KUBEFLOW_TRAINER_SERVER_URL`` and its token file): the body is the Trainer's
UpdateTrainJobStatusRequest, the posts never block the rank, and nothing is posted without the
variables or from another rank. The real controller's answer is tested on the real cluster."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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
    body = progress.body(104.0)["trainerStatus"]
    assert body["progressPercentage"] == 40 and body["estimatedRemainingSeconds"] == 12
    progress.feed({"event": "done"}, now=110.0)
    assert progress.body(110.0)["trainerStatus"]["progressPercentage"] == 100


class Server:
    """An HTTP server on 127.0.0.1 that keeps what is posted to it, as the status server takes it."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, str, dict]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers["Content-Length"])
                owner.posts.append((self.path, self.headers["Authorization"], json.loads(self.rfile.read(length))))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


def test_rank_0_posts_its_progress_with_its_token_and_the_last_at_once(tmp_path: Path) -> None:
    server = Server()
    (tmp_path / "token").write_text("secret-token\n")
    path = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/e2e/trainjobs/run-1/status"
    env = {"KUBEFLOW_TRAINER_SERVER_URL": server.url + path, "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "token")}
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
    server = Server()
    (tmp_path / "token").write_text("t")
    env = {"KUBEFLOW_TRAINER_SERVER_URL": server.url + "/x", "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "token")}
    for status in (TrainerStatus({}, rank=0), TrainerStatus(env, rank=1)):
        status.feed({"event": "step", "step": 1, "total_steps": 1})
        status.feed({"event": "done"})
    server.httpd.shutdown()
    assert server.posts == []


def test_a_refusing_server_is_said_once_and_training_goes_on(tmp_path: Path, capsys) -> None:
    env = {
        "KUBEFLOW_TRAINER_SERVER_URL": "http://127.0.0.1:9/x",
        "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "none"),
    }
    status = TrainerStatus(env, rank=0)
    status.feed({"event": "step", "step": 1, "total_steps": 2})
    status.feed({"event": "done"})
    status.close()
    assert capsys.readouterr().err.count("status server did not take the progress") == 1


def test_status_prints_the_trainers_own_line() -> None:
    from torchdeck.cli.jobs import trainer_status_words

    line = trainer_status_words(status_body(10, 10, 0, {"loss": 0.52}, now=0.0)["trainerStatus"])
    assert line == "100% done, 0 s left, step=10 loss=0.52 (updated 1970-01-01T00:00:00Z)"
