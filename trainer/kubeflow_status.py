"""Progress for Kubeflow Trainer's own status: where the Trainer (v2.2 and later, its
``TrainJobStatus`` feature gate on) runs a TrainJob's pods, it gives each the URL of its status
server, its CA and a projected service-account token (``KUBEFLOW_TRAINER_SERVER_URL``,
``..._CA_CERT``, ``..._TOKEN``: files). Rank 0 posts there what torchdeck already reads from the rank
(its step, the total, the time left and the latest metrics), so ``kubectl get trainjob -o yaml``
(``status.trainerStatus``) and any Kubeflow UI show the progress the console shows. The body is the
Trainer's ``UpdateTrainJobStatusRequest`` (kubeflow/trainer, pkg/apis/trainer/v1alpha1).

Posting never blocks training or fails it: the newest status is sent from a thread at most every
``EVERY_S`` (the last one at once), a refusal is said once on stderr and the rest is dropped.
Standard library only: the code bundle carries this file beside the relay."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from http.client import HTTPMessage

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
EVERY_S = 5.0
"""The Trainer's status server limits each client's rate; its own SDK callbacks post about this often."""
METRICS = ("loss", "accuracy", "val_loss", "val_accuracy", "lr", "samples_per_s")
"""The record fields that become the status's metrics, besides the step (what the console's curves show)."""


def status_body(
    step: int | None, total: int | None, remaining_s: float | None, metrics: Mapping[str, object], now: float
) -> dict[str, object]:
    """The Trainer's UpdateTrainJobStatusRequest for a rank at ``step`` of ``total``."""
    status: dict[str, object] = {
        "lastUpdatedTime": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    }
    if step is not None and total:
        status["progressPercentage"] = max(0, min(100, int(100 * step / total)))
    if remaining_s is not None:
        status["estimatedRemainingSeconds"] = max(0, int(remaining_s))
    shown = [{"name": "step", "value": str(step)}] if step is not None else []
    shown += [{"name": k, "value": str(v)} for k, v in metrics.items() if v is not None]
    if shown:
        status["metrics"] = shown
    return {"trainerStatus": status}


class Progress:
    """A rank's progress as its records say it: step, total, the pace since the first step seen."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.total: int | None = None
        self.metrics: dict[str, object] = {}
        self.first: tuple[float, int] | None = None
        self.last_time = 0.0
        self.done = False

    def feed(self, record: Mapping[str, object], now: float) -> bool:
        """Take one schema-1 record; whether it moved the progress."""
        total = record.get("total_steps")
        if isinstance(total, int) and total > 0:
            self.total = total
        step = record.get("step")
        moved = False
        if isinstance(step, int) and (self.step is None or step >= self.step):
            moved = step != self.step
            self.step = step
            if self.first is None:
                self.first = (now, step)
            self.last_time = now
        for name in METRICS:
            value = record.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.metrics[name] = value
                moved = True
        if record.get("event") == "done":
            self.done, moved = True, True
            if self.step is not None and not self.total:
                self.total = self.step
        return moved

    def remaining_s(self) -> float | None:
        if self.done:
            return 0.0
        if self.first is None or self.step is None or not self.total or self.step <= self.first[1]:
            return None
        per_step = (self.last_time - self.first[0]) / (self.step - self.first[1])
        return per_step * max(0, self.total - self.step)

    def body(self, now: float) -> dict[str, object]:
        step = self.total if self.done and self.total else self.step
        return status_body(step, self.total, self.remaining_s(), self.metrics, now)


class TrainerStatus:
    """Posts rank 0's progress to the Trainer's status server, where the pod was given one."""

    def __init__(self, environ: Mapping[str, str] = os.environ, rank: int | None = None) -> None:
        self.url = environ.get(URL_ENV, "")
        self.ca, self.token = environ.get(CA_ENV, ""), environ.get(TOKEN_ENV, "")
        rank = int(environ.get("RANK", "0") or 0) if rank is None else rank
        self.enabled = bool(self.url) and rank == 0
        self.progress = Progress()
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._body: dict[str, object] | None = None
        self._sent_at = 0.0
        self._said = False
        self._thread: threading.Thread | None = None

    def feed(self, record: Mapping[str, object]) -> None:
        """Take one schema-1 record of the rank (its step line, its end); post what changed."""
        if not self.enabled:
            return
        now = time.time()
        if not self.progress.feed(record, now):
            return
        with self._lock:
            self._body = self.progress.body(now)
        if self.progress.done:
            self.close()
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kubeflow-status", daemon=True)
            self._thread.start()
        self._wanted.set()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            wait = self._sent_at + EVERY_S - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._wanted.clear()
            self._send()

    def _send(self) -> None:
        with self._lock:
            body, self._body = self._body, None
        if body is None:
            return
        self._sent_at = time.monotonic()
        try:
            self.post(body)
        except (OSError, ValueError) as exc:  # refused, unreachable, a token not mounted: said once
            if not self._said:
                self._said = True
                print(f"torchdeck: Kubeflow Trainer's status server did not take the progress: {exc}", file=sys.stderr)

    def post(self, body: Mapping[str, object]) -> None:
        """One status update, to the server the pod was given, over TLS only, never redirected: the
        token is the pod's service account's, and goes nowhere else."""
        import ssl  # here: torchdeck's console reads this module's parser, and draws before HTTP loads
        import urllib.request

        if not self.url.lower().startswith("https://"):
            raise ValueError(f"{URL_ENV} is not an https:// URL: the token is sent over TLS only")
        with open(self.token, encoding="utf-8") as f:
            token = f.read().strip()
        context = ssl.create_default_context(cafile=self.ca or None)
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            """A redirect is refused: urllib would follow it with the Authorization header."""

            def redirect_request(
                self,
                req: urllib.request.Request,
                fp: IO[bytes],
                code: int,
                msg: str,
                headers: HTTPMessage,
                newurl: str,
            ) -> None:
                raise OSError(f"the status server answered {code} to {newurl[:120]}: not followed (the token stays)")

        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), NoRedirect())
        with opener.open(request, timeout=5) as answer:
            answer.read()

    def close(self) -> None:
        """Post the newest progress now (the rank's last)."""
        if self.enabled:
            self._send()
