"""moto in server mode on 127.0.0.1: a real HTTP endpoint that boto3 reaches
through AWS_ENDPOINT_URL, as the product's own code does in the cloud."""

from __future__ import annotations

import socket
from typing import Iterator

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def aws_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment for boto3 (in this process and in subprocesses) to use moto."""
    values = {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
              "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    return values
