"""A kubeconfig context as the official client resolves it, worked out in a process of its own.

Loading the client costs a process 57 MB, and the console reads a cluster (pods, statuses, logs,
nodes) for as long as it watches a run. So its reads go through urllib3, the client's own
transport, with what ``kubernetes.config`` made of the kubeconfig (the server, its TLS material,
the bearer token its credential command gave); the client itself is loaded in this short-lived
child, and again when a token expires. Writes (submit, stop) load it in the console as before.

    python -m torchdeck.backends.kubernetes.resolve   # a JSON request on stdin, an answer on stdout
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def resolve(kubeconfig: str | None, context: str | None) -> dict[str, Any]:
    """What a request to the context needs, with the TLS files' contents (the client writes
    inline certificate data to temporary files that go with this process)."""
    import yaml
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    from ..errors import file_problem

    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        return {"error": f"cannot use the kubeconfig: {file_problem(exc)}"}
    namespace = None
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = next((c for c in contexts if c["name"] == context), active)
        namespace = (chosen.get("context") or {}).get("namespace") or "default"
    except (ConfigException, TypeError, KeyError):
        pass
    auth = cfg.auth_settings().get("BearerToken")

    def pem(path: str | None) -> str | None:
        return Path(path).read_text() if path else None

    return {
        "host": cfg.host,
        "authorization": auth["value"] if auth and auth.get("value") else None,
        "verify": bool(cfg.verify_ssl),
        "ca": pem(cfg.ssl_ca_cert),
        "cert": pem(cfg.cert_file),
        "key": pem(cfg.key_file),
        "proxy": cfg.proxy,
        "server_name": cfg.tls_server_name,
        "namespace": namespace,
    }


def main() -> int:
    ask = json.loads(sys.stdin.read())
    json.dump(resolve(ask.get("kubeconfig"), ask.get("context")), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
