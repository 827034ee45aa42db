#!/usr/bin/env bash
# The real Kubernetes cluster of the end-to-end tests (tests/cluster/): start, stop, status,
# kubeconfig, load IMAGE..., kubectl ARGS, ctr ARGS, build, kueue-integrations default|torchdeck.
# The tool is the Python package scripts/cluster/kubecluster (stdlib only, run by the system python3
# as root before any venv exists); its docstrings say what each part does, manifests/versions.toml
# the releases it runs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHONPATH="$here/cluster${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m kubecluster "$@"
