"""A kubeconfig context as the official client resolves it, worked out in a process of its own.

Loading the client costs a process 57 MB, and the console reads a cluster (pods, statuses, logs,
nodes) for as long as it watches a run. So its reads go through urllib3, the client's own
transport, with what ``kubernetes.config`` made of the kubeconfig (the server, its TLS material,
the bearer token its credential command gave); the client itself is loaded in this short-lived
child, and again when a token expires. Writes (submit, stop) load it in the console as before.

    python -m torchdeck.backends.kubernetes.resolve   # a JSON request on stdin, an answer on stdout
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendError, SpecError, file_problem
from ..files import load_yaml

if TYPE_CHECKING:
    import ssl
    from collections.abc import Iterable

    from kubernetes.client import Configuration
    from urllib3 import PoolManager

KUBECONFIG_HINT = (
    "set KUBECONFIG (or TORCHDECK_KUBECONFIG) and pick a context with --context; "
    "for EKS: aws eks update-kubeconfig --name CLUSTER"
)


def load_config(kubeconfig: str | None, context: str | None) -> tuple[Configuration, str | None]:
    """The official client's Configuration for the context, and the context's namespace (None if
    the file does not say). A kubeconfig it cannot use is a BackendError, in one line."""
    import yaml
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    check_kubeconfig_files(kubeconfig)
    # $KUBECONFIG as it is now: the client reads it once, when it is first imported
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        raise BackendError(f"cannot use the kubeconfig: {file_problem(exc)}", KUBECONFIG_HINT) from None
    namespace = None
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = next((c for c in contexts if c["name"] == context), active)
        settings = chosen.get("context")
        namespace = (settings.get("namespace") if isinstance(settings, dict) else None) or "default"
    except (ConfigException, TypeError, KeyError):
        pass
    return cfg, namespace


def check_kubeconfig_files(kubeconfig: str | None) -> None:
    """Every file the official client would read for ``kubeconfig`` (else $KUBECONFIG's list, else
    ~/.kube/config) through torchdeck's reader first: a FIFO, a device, a huge file, aliases or
    deep nesting end in one line naming the file, before the client's own loader meets them."""
    listed = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    for name in listed.split(os.pathsep) if not kubeconfig else [kubeconfig]:
        if not name:
            continue
        try:
            load_yaml(Path(name).expanduser(), hint=KUBECONFIG_HINT)
        except FileNotFoundError:
            continue  # the client says which file is missing, with its hint
        except SpecError as exc:
            raise BackendError(f"cannot use the kubeconfig: {exc.message}", exc.hint) from None


@dataclass(frozen=True)
class Resolved:
    """A kubeconfig context as the official client resolved it: what a GET needs (the server, its
    TLS files, the bearer token). Reads go through urllib3, the client's own transport, with
    these, so that a process that only reads (the console watching a run, its metric reader)
    never loads the client: importing it costs 57 MB a process. A 401 (a token that expired: EKS's
    last 15 minutes) resolves the kubeconfig again, which runs its credential command again."""

    host: str
    headers: tuple[tuple[str, str], ...]
    verify: bool
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    proxy: str | None
    server_name: str | None

    @classmethod
    def of(cls, cfg: Configuration) -> Resolved:
        """From the official client's Configuration (its token refreshed if it had expired)."""
        auth = cfg.auth_settings().get("BearerToken")
        return cls(
            host=cfg.host.rstrip("/"),
            headers=(("authorization", auth["value"]),) if auth and auth.get("value") else (),
            verify=bool(cfg.verify_ssl),
            ca_file=cfg.ssl_ca_cert,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
            proxy=cfg.proxy,
            server_name=cfg.tls_server_name,
        )

    @classmethod
    def load(cls, kubeconfig: str | None, context: str | None) -> tuple[Resolved, str | None]:
        """Resolved by the official client in a child process (``resolve.py``), and the context's
        namespace. The TLS material it names is written to files of this process's own (0600,
        removed at exit)."""
        import atexit
        import shutil
        import subprocess
        import sys
        import tempfile

        try:
            done = subprocess.run(
                [sys.executable, "-m", "torchdeck.backends.kubernetes.resolve"],
                input=json.dumps({"kubeconfig": kubeconfig, "context": context}),
                capture_output=True,
                text=True,
                timeout=120,
            )
            answer = json.loads(done.stdout)
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            last = (getattr(exc, "stderr", None) or "").strip().splitlines()
            raise BackendError(
                f"cannot read the kubeconfig: {last[-1] if last else exc}"[:300],
                "check that `kubectl config view` works here",
            ) from None
        if "error" in answer:
            raise BackendError(answer["error"], KUBECONFIG_HINT)
        fields = answer["resolved"]
        folder = None
        for name, text in answer["pems"].items():
            if text:
                if folder is None:
                    folder = tempfile.mkdtemp(prefix="torchdeck-kube-")
                    atexit.register(shutil.rmtree, folder, True)
                path = Path(folder) / f"{name}.pem"
                path.touch(mode=0o600)
                path.write_text(text)
                fields[name] = str(path)
        fields["headers"] = tuple(tuple(pair) for pair in fields["headers"])
        return cls(**fields), answer.get("namespace")

    def pool(self) -> PoolManager:
        """A connection pool for this server, every connection made with one TLS context.

        urllib3 given the files instead makes a context for each connection and loads the CA and
        the client's key into it again: about 25 KB and a key parse a connection, which is most of
        what the monitor's reader of a 1,024-pod run holds for its log streams."""
        import urllib3

        args: dict[str, Any] = {
            "num_pools": 4,
            "maxsize": 512,
            "ssl_context": self.tls_context(),
            "cert_reqs": "CERT_REQUIRED" if self.verify else "CERT_NONE",
            "retries": False,
        }
        if self.server_name:
            args["server_hostname"] = self.server_name
        if self.proxy:
            return urllib3.ProxyManager(proxy_url=self.proxy, **args)
        return urllib3.PoolManager(**args)

    def tls_context(self) -> ssl.SSLContext:
        """The context urllib3 would make for a connection to this server (its own defaults: the
        CA file, or the system's where none is named; verified or not; the client's certificate),
        made once. Raises BackendError naming the file that cannot be used."""
        import ssl

        from urllib3.util.ssl_ import ALPN_PROTOCOLS, create_urllib3_context

        class Shared(ssl.SSLContext):
            """Shared by the connections the opener threads make at once. urllib3 sets ALPN on the
            context for each connection, and setting it frees the protocols another thread's
            handshake may be copying (CPython lets go of the GIL for ``SSL_new``): set once here."""

            def set_alpn_protocols(self, protocols: Iterable[str]) -> None:
                wanted = tuple(protocols)
                if getattr(self, "alpn", None) != wanted:
                    super().set_alpn_protocols(wanted)
                    self.alpn = wanted

        def encrypted() -> bytes:
            raise BackendError(
                "the kubeconfig's client key is encrypted, and torchdeck asks for no password",
                "give the context a key without a passphrase (openssl pkey -in KEY -out KEY2), or a token",
            )

        context = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED if self.verify else ssl.CERT_NONE)
        context.__class__ = Shared
        context.set_alpn_protocols(ALPN_PROTOCOLS)
        try:
            if self.ca_file:
                context.load_verify_locations(self.ca_file)
            else:
                context.load_default_certs()
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file, password=encrypted)
        except (OSError, ssl.SSLError) as exc:
            raise BackendError(
                f"cannot use the kubeconfig's TLS files: {exc}",
                "check certificate-authority, client-certificate and client-key in the kubeconfig",
            ) from None
        return context


def resolve(kubeconfig: str | None, context: str | None) -> dict[str, object]:
    """``Resolved``'s fields, the TLS files' contents (the client writes inline certificate data
    to temporary files that go with this process) and the namespace; or the error, in one line."""
    try:
        cfg, namespace = load_config(kubeconfig, context)
    except BackendError as exc:
        return {"error": exc.message}

    def pem(path: str | None) -> str | None:
        return Path(path).read_text() if path else None

    pems = {"ca_file": pem(cfg.ssl_ca_cert), "cert_file": pem(cfg.cert_file), "key_file": pem(cfg.key_file)}
    return {"resolved": dataclasses.asdict(Resolved.of(cfg)), "pems": pems, "namespace": namespace}


def main() -> int:
    ask = json.loads(sys.stdin.read())
    json.dump(resolve(ask.get("kubeconfig"), ask.get("context")), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
