# shellcheck shell=bash
# Sourced by scripts/start and scripts/test: make .venv with torchdeck
# installed (editable) and the right PyTorch build, idempotently.
# Usage: source scripts/setup.sh EXTRAS   (e.g. "trainer" or "dev")
# Never lets pip pull CUDA packages onto a machine without an NVIDIA GPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

extras="$1"
python="${PYTHON:-python3}"
venv=".venv"
# One PyTorch release for setup, CI and both training images: docker/torch-version.
torch_version="${TORCHDECK_TORCH_VERSION:-$(cat docker/torch-version)}"
# Where PyPI's torch (and what it needs) is kept once fetched, outside the work tree: a fresh clone,
# and CI's, installs from it without fetching several GB again.
wheels="${TORCHDECK_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/torchdeck/wheels}/torch-$torch_version"

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "torchdeck needs Python 3.10 or newer; set PYTHON=/path/to/python3.x" >&2
    exit 1
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
vpy="$venv/bin/python"

# Skip the installs when nothing they depend on changed since the last setup.
stamp="$venv/.torchdeck-setup-$extras-$(cat pyproject.toml scripts/setup.sh docker/torch-version | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && "$vpy" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("torch") and u.find_spec("torchdeck")))' 2>/dev/null; then
    # shellcheck disable=SC2317 # (sourced, it returns; run, it exits)
    return 0 2>/dev/null || exit 0
fi

log="$venv/setup.log"
: >"$log"
# pip's own output (and setuptools' build notes) go to the log, shown only on failure.
pip() { "$vpy" -m pip --disable-pip-version-check "$@" >>"$log" 2>&1 || { cat "$log" >&2; return 1; }; }
echo "torchdeck: setting up $venv (extras: $extras; log in $log)" >&2
pip install -q --upgrade pip
if ! "$vpy" -c 'import torch' 2>/dev/null; then
    if [ "$(uname -s)" = "Linux" ] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
        # Linux without an NVIDIA GPU: PyTorch's CPU build (a local "+cpu"
        # version), from the configured sources or else PyTorch's CPU index.
        # Where neither is reachable (a proxy that passes PyPI alone), PyPI's own build: it carries
        # CUDA's libraries (several GB) and runs on the CPU all the same.
        "$vpy" -m pip install -q "torch==$torch_version+cpu" >>"$log" 2>&1 \
            || "$vpy" -m pip install -q --timeout 20 --retries 0 "torch==$torch_version+cpu" \
                --extra-index-url https://download.pytorch.org/whl/cpu >>"$log" 2>&1 \
            || { echo "torchdeck: no CPU build of torch $torch_version is reachable; installing PyPI's from $wheels" >&2
                 # fetched once into a folder outside the work tree (several GB), every later venv from it
                 { ls "$wheels"/torch-"$torch_version"-*.whl >/dev/null 2>&1 \
                   && "$vpy" -m pip install -q --no-index --find-links "$wheels" "torch==$torch_version" >>"$log" 2>&1; } \
                 || { pip download -q -d "$wheels" "torch==$torch_version" \
                      && pip install -q --no-index --find-links "$wheels" "torch==$torch_version"; }; }
    else
        # macOS wheels are CPU/MPS builds; Linux with a GPU gets the CUDA build.
        pip install -q "torch==$torch_version"
    fi
fi
# torch is now installed, so the extras' torch requirement pulls nothing more.
pip install -q "setuptools>=77" wheel
pip install -q -e ".[$extras]"
rm -f "$venv"/.torchdeck-setup-"$extras"-*
touch "$stamp"
