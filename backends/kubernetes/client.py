"""The Kubernetes API's failures as the project's errors, and its
quantities as numbers: shared by the kubernetes backend and its streams."""

from __future__ import annotations

import json
from typing import Any

from ..errors import BackendError


class ApiError(BackendError):
    """The API server answered with an error status."""

    def __init__(self, message: str, hint: str = "", status: int = 0, reason: str = ""):
        super().__init__(message, hint)
        self.status, self.reason = status, reason

    @classmethod
    def from_exception(cls, exc) -> "ApiError":
        status = getattr(exc, "status", 0) or 0
        message, reason = "", getattr(exc, "reason", "") or ""
        try:
            body = json.loads(exc.body or "{}")
            message, reason = body.get("message") or "", body.get("reason") or reason
        except (TypeError, ValueError):
            pass
        hints = {401: "your credentials expired or are wrong: refresh the kubeconfig (aws eks update-kubeconfig)",
                 403: "your identity lacks the RBAC permission for this; ask a cluster admin",
                 404: "", 409: "an object with that name exists already", 410: "",
                 422: "the cluster refused the manifest: torchdeck render --validate shows what is wrong"}
        return cls(f"the cluster said {status} {reason}: {message}".rstrip(": "), hints.get(status, ""), status, reason)


class Unreachable(BackendError):
    """No answer from the API server (network, DNS, TLS, timeout)."""


def quantity(text: Any) -> float:
    """A Kubernetes quantity as a number: "3500m" -> 3.5, "8Gi" -> 8589934592, "2" -> 2."""
    text = str(text).strip()
    units = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
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
