"""The Dockerfiles and the package: what the images copy and run exists,
and a regular (non-editable) install works with its package data."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from trainer_runs import REPO

DOCKERFILES = ["Dockerfile.cpu", "Dockerfile.gpu"]


def instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_copies_what_exists_and_runs_the_trainer(name: str) -> None:
    steps = instructions(REPO / "docker" / name)
    base = next(arg for op, arg in steps if op == "FROM")
    image, _, tag = base.partition(":")
    assert image in ("pytorch/pytorch", "python") and re.match(r"\d+\.\d+\.\d+", tag), base  # pinned release
    for op, arg in steps:
        if op == "COPY":
            *sources, _dest = shlex.split(arg)
            for src in sources:
                assert (REPO / src).exists(), f"{name} copies {src}, which is not in the repository"
    installs = " ".join(arg for op, arg in steps if op == "RUN" and "pip install" in arg)
    assert '".[trainer' in installs  # the trainer extra, not the console's dependencies
    if "cpu" in name:
        assert "download.pytorch.org/whl/cpu" in installs  # no CUDA packages in the CPU image
    users = [arg for op, arg in steps if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    entry = next(arg for op, arg in steps if op == "ENTRYPOINT")
    cmd = " ".join(" ".join(json.loads(arg)) for op, arg in steps if op == "CMD")  # exec form: a JSON list
    assert "torchrun" in entry and "-m torchdeck.trainer" in cmd and "--rdzv-backend=c10d" in cmd
    assert (REPO / "trainer" / "__main__.py").is_file()


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(REPO)], check=True, capture_output=True, cwd=out)
    return next(out.glob("torchdeck-*.whl"))


def test_wheel_holds_the_packages_and_their_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in ("torchdeck/__init__.py", "torchdeck/trainer/train.py", "torchdeck/trainer/evaluate.py",
                     "torchdeck/tui/cli.py", "torchdeck/backends/__init__.py",
                     "torchdeck/docker/Dockerfile.cpu", "torchdeck/docker/Dockerfile.gpu"):
        assert expected in names
    assert not [n for n in names if n.startswith(("torchdeck/tests", "torchdeck/benchmarks", "torchdeck/.venv"))]
    metadata = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Requires-Dist: torch>=2.3; extra == \"trainer\"" in text
    assert not re.search(r"Requires-Dist: torch[^;]*$", text, re.M)  # torch is never a core dependency


def test_regular_install_runs_the_trainer(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    code = (f"import sys; sys.path.insert(0, {str(site)!r})\n"
            "import torchdeck, importlib.resources as r\n"
            "from torchdeck.trainer import train\n"
            "print(torchdeck.__file__)\n"
            "print((r.files('torchdeck') / 'docker' / 'Dockerfile.gpu').is_file())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    path, has_data = out.stdout.split()
    assert path.startswith(str(site)) and has_data == "True"
    help_out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(site)!r}); "
                               "sys.argv=['x', '--help']; import runpy; runpy.run_module('torchdeck.trainer', run_name='__main__')"],
                              capture_output=True, text=True, cwd=tmp_path)
    assert help_out.returncode == 0 and "--checkpoint-every" in help_out.stdout
