#!/usr/bin/env bash
# A training user's own virtual environment for the tests: Lightning, TensorBoard, MLflow and tqdm
# from PyPI (tests/user-venv.txt) in .venv-user, with .venv's torch seen through a .pth file, so
# pip never pulls another torch. Idempotent; ./scripts/test runs it after setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=".venv-user"
stamp="$venv/.stamp-$(cat tests/user-venv.txt scripts/user-venv.sh | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
rm -rf "$venv"
.venv/bin/python -c 'import sys; print(sys.base_prefix)' >/dev/null
python="$(.venv/bin/python -c 'import sys, os; print(os.path.realpath(sys._base_executable))')"
"$python" -m venv "$venv"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/torch_from_dot_venv.pth"
torch_version="$("$venv/bin/python" -c 'import torch, importlib.metadata as m; print(m.version("torch"))')"  # fails here, before any pip (the wheel's version: PyPI's build says 2.13.0+cu130 at run time)
log="$venv/setup.log"
echo "torchdeck: setting up $venv (the user-code tests' libraries; log in $log)" >&2
echo "torch==$torch_version" >"$venv/constraints.txt"
"$venv/bin/python" -m pip --disable-pip-version-check install -q -r tests/user-venv.txt \
    -c "$venv/constraints.txt" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
touch "$stamp"
