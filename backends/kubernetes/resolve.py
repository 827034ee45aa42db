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
from pathlib import Path
from typing import Any

from ..errors import BackendError, SpecError, file_problem
from ..files import load_yaml

KUBECONFIG_HINT = (
    "set KUBECONFIG (or TORCHDECK_KUBECONFIG) and pick a context with --context; "
    "for EKS: aws eks update-kubeconfig --name CLUSTER"
)


def load_config(kubeconfig: str | None, context: str | None) -> tuple[Any, str | None]:
    """The official client's Configuration for the context, and the context's namespace (None if
    the file does not say). A kubeconfig it cannot use is a BackendError, in one line."""
    import yaml
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    check_kubeconfig_files(kubeconfig)
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        raise BackendError(f"cannot use the kubeconfig: {file_problem(exc)}", KUBECONFIG_HINT) from None
    namespace = None
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = next((c for c in contexts if c["name"] == context), active)
        namespace = (chosen.get("context") or {}).get("namespace") or "default"
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


def resolve(kubeconfig: str | None, context: str | None) -> dict[str, Any]:
    """``Resolved``'s fields, the TLS files' contents (the client writes inline certificate data
    to temporary files that go with this process) and the namespace; or the error, in one line."""
    from .client import Resolved

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
