"""The client's TLS against a real TLS server on 127.0.0.1: the server's certificate checked against
the kubeconfig's CA, the client's certificate sent, and every connection made with one context
(a context a connection held ~25 KB and a key parse each: at a 1,024-pod run's log streams, most of
the reader's memory)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from torchdeck.backends.errors import BackendError
from torchdeck.backends.kubernetes.client import KubeClient


def _pem(obj: object) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    assert isinstance(obj, ec.EllipticCurvePrivateKey)
    return obj.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _issue(name: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None, server: bool = False):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    return cert, key


class _Pods(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (the handler's name)
        peer = self.connection.getpeercert()  # type: ignore[attr-defined]
        names = [value for rdn in (peer or {}).get("subject", ()) for key, value in rdn if key == "commonName"]
        self.seen.append(names[0] if names else "")
        body = json.dumps({"kind": "Pod", "metadata": {"name": self.path.rsplit("/", 1)[-1]}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def tls_cluster(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A TLS server that asks for the client's certificate, and two kubeconfigs: one with the
    server's CA, one with another CA."""
    ca = _issue("test-ca", None)
    other_ca = _issue("other-ca", None)
    server_cert, server_key = _issue("apiserver", ca, server=True)
    client_cert, client_key = _issue("alice", ca)
    (tmp_path / "server.pem").write_bytes(_pem(server_cert) + _pem(server_key))
    (tmp_path / "ca.pem").write_bytes(_pem(ca[0]))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.pem")
    context.load_verify_locations(tmp_path / "ca.pem")
    context.verify_mode = ssl.CERT_REQUIRED
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pods)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    _Pods.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def kubeconfig(name: str, authority: x509.Certificate) -> Path:
        def data(obj: object) -> str:
            return base64.b64encode(_pem(obj)).decode()

        path = tmp_path / name
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "c",
                            "cluster": {
                                "server": f"https://127.0.0.1:{server.server_address[1]}",
                                "certificate-authority-data": data(authority),
                            },
                        }
                    ],
                    "users": [
                        {
                            "name": "u",
                            "user": {"client-certificate-data": data(client_cert), "client-key-data": data(client_key)},
                        }
                    ],
                    "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
                    "current-context": "ctx",
                }
            )
        )
        return path

    try:
        yield kubeconfig("good", ca[0]), kubeconfig("other-ca", other_ca[0])
    finally:
        server.shutdown()
        server.server_close()


def test_every_connection_is_made_with_one_context_and_sends_the_client_certificate(tls_cluster):
    good, _ = tls_cluster
    client = KubeClient(good)
    streams = [client.request("GET", f"api/v1/namespaces/team/pods/p{i}", stream=True) for i in range(6)]
    # six responses held open at once: six connections
    sockets = [response.connection.sock for response in streams]
    assert len({id(sock) for sock in sockets}) == 6
    assert len({id(sock.context) for sock in sockets}) == 1
    assert all(sock.context.verify_mode == ssl.CERT_REQUIRED for sock in sockets)
    assert [json.loads(response.data)["metadata"]["name"] for response in streams] == [f"p{i}" for i in range(6)]
    assert _Pods.seen == ["alice"] * 6
    assert client.context_namespace == "team"


def test_a_server_the_kubeconfigs_ca_did_not_sign_is_refused_in_one_line(tls_cluster):
    _, other = tls_cluster
    with pytest.raises(BackendError) as caught:
        KubeClient(other).request("GET", "api/v1/namespaces/team/pods/p")
    assert "certificate verify failed" in caught.value.message
    assert "\n" not in caught.value.message and caught.value.hint
    assert _Pods.seen == []


def test_a_client_key_that_is_not_the_certificates_is_said_in_one_line(tls_cluster, tmp_path):
    good, _ = tls_cluster
    config = yaml.safe_load(good.read_text())
    config["users"][0]["user"]["client-key-data"] = base64.b64encode(
        _pem(ec.generate_private_key(ec.SECP256R1()))
    ).decode()
    wrong = tmp_path / "wrong-key"
    wrong.write_text(yaml.safe_dump(config))
    with pytest.raises(BackendError) as caught:
        KubeClient(wrong).request("GET", "api/v1/namespaces/team/pods/p")
    assert caught.value.message.startswith("cannot use the kubeconfig's TLS files:")
    assert "\n" not in caught.value.message and "client-key" in caught.value.hint


def test_an_encrypted_client_key_is_said_in_one_line_and_nothing_asks_on_the_terminal(tls_cluster, tmp_path):
    """OpenSSL asks for a key's passphrase on the terminal where no password is given: the console
    would hang, or the prompt would garble its screen. torchdeck asks for none, and says why."""
    good, _ = tls_cluster
    config = yaml.safe_load(good.read_text())
    key = serialization.load_pem_private_key(base64.b64decode(config["users"][0]["user"]["client-key-data"]), None)
    locked = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"secret")
    )
    config["users"][0]["user"]["client-key-data"] = base64.b64encode(locked).decode()
    path = tmp_path / "locked"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(BackendError) as caught:
        KubeClient(path).request("GET", "api/v1/namespaces/team/pods/p")
    assert "encrypted" in caught.value.message and "\n" not in caught.value.message and caught.value.hint
    assert _Pods.seen == []
