"""The Dockerfiles and the package: what the images copy and run exists,
and a regular (non-editable) install works with its package data."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from trainer_runs import REPO, trainer_env

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
    assert "pip install --no-deps /opt/torchdeck/src" in installs and "numpy" in installs  # the trainer's needs only
    for dependency in console_dependencies():
        assert dependency not in installs.replace("--no-deps", ""), f"{name} installs the console's {dependency}"
    version = (REPO / "docker" / "torch-version").read_text().strip()
    assert f"ARG TORCH_VERSION={version}" in (REPO / "docker" / name).read_text()
    assert '"torch==${TORCH_VERSION}"' in installs
    assert '--index-url "${TORCH_INDEX_URL}"' in installs  # a mirror's index where the default is out of reach
    if "cpu" in name:  # no CUDA packages in the CPU image: PyTorch's CPU index by default
        assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in (REPO / "docker" / name).read_text()
    users = [arg for op, arg in steps if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    entry = next(arg for op, arg in steps if op == "ENTRYPOINT")
    cmd = " ".join(" ".join(json.loads(arg)) for op, arg in steps if op == "CMD")  # exec form: a JSON list
    assert "torchrun" in entry and "-m torchdeck.trainer" in cmd and "--rdzv-backend=c10d" in cmd
    assert (REPO / "trainer" / "__main__.py").is_file()


def console_dependencies() -> list[str]:
    """The distribution names of the package's core dependencies (what the console needs)."""
    text = (REPO / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    return [re.match(r"[A-Za-z0-9_.-]+", d).group(0) for d in re.findall(r'"([^"]+)"', block)]


def test_one_pytorch_release_for_setup_ci_and_the_images() -> None:
    import torch

    version = (REPO / "docker" / "torch-version").read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert "$(cat docker/torch-version)" in (REPO / "scripts" / "setup.sh").read_text()
    assert torch.__version__.split("+")[0] == version  # what setup installed, and every test runs


def test_the_trainer_runs_without_the_consoles_dependencies(tmp_path: Path) -> None:
    """What a training image has: torchdeck, torch and numpy. Every core dependency of the
    package is made unimportable, and the trainer still takes a step and writes its summary."""
    modules = {"pyyaml": "yaml"}
    blocked = sorted({modules.get(d, d.replace("-", "_")) for d in console_dependencies()} | {"botocore"})
    assert {"textual", "boto3", "kubernetes", "yaml"} <= set(blocked)
    code = (
        "import runpy, sys\n"
        f"BLOCKED = {blocked!r}\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError(name + ' is not in the training image')\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.argv = ['torchdeck.trainer'] + sys.argv[1:]\n"
        "runpy.run_module('torchdeck.trainer', run_name='__main__')\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "--dataset",
            "synthetic",
            "--model",
            "seed-cnn",
            "--max-steps",
            "1",
            "--batch-size",
            "8",
            "--checkpoint-dir",
            str(tmp_path / "ck"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=trainer_env(),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    done = [json.loads(line) for line in out.stdout.splitlines() if '"event":"done"' in line]
    assert done and done[0]["step"] == 1


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)


PACKAGE_SUFFIXES = (".py", ".tcss", ".j2")
NOT_PACKAGED = ("tests", "benchmarks", "scripts", "examples", "docs", "build", "dist", ".git", ".ci", ".venv")


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.split("\0") if f and (REPO / f).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds from a clean copy of the tracked files (never in
    the source tree, which would leave build/ there: a second copy of every
    module for the next run to import)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    for name in tracked_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    out = root / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        cwd=root,
    )
    assert not (REPO / "build").exists(), "building the wheel must not write into the source tree"
    return next(out.glob("torchdeck-*.whl"))


def test_wheel_holds_every_module_stylesheet_and_template(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {
        f"torchdeck/{f}"
        for f in tracked_files()
        if f.endswith(PACKAGE_SUFFIXES) and f.split("/")[0] not in NOT_PACKAGED
    }
    assert {
        "torchdeck/tui/screens/monitor.py",
        "torchdeck/tui/widgets/rank_table.py",
        "torchdeck/tui/app.tcss",
        "torchdeck/manifests/pytorchjob.yaml.j2",
    } <= wanted  # the walk sees them
    assert sorted(wanted - names) == []
    for expected in ("torchdeck/docker/Dockerfile.cpu", "torchdeck/docker/Dockerfile.gpu", "torchdeck/py.typed",
                     "torchdeck/docker/mpi/install.sh", "torchdeck/docker/mpi/sshd_config"):  # fmt: skip
        assert expected in names
    assert not [n for n in names if n.startswith(tuple(f"torchdeck/{d}/" for d in NOT_PACKAGED))]
    # a folder of the repository that is no package of torchdeck's (the cluster tool's modules, the
    # tests' support) holds no __init__.py: nothing there reads as a subpackage the wheel leaves out
    stray = [f for f in tracked_files() if f.endswith("__init__.py") and f.split("/")[0] in NOT_PACKAGED]
    assert stray == []
    metadata = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert 'Requires-Dist: torch>=2.3; extra == "trainer"' in text
    assert not re.search(r"Requires-Dist: torch[^;]*$", text, re.M)  # torch is never a core dependency


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed (not editable).
    Its dependencies come from the test environment's site-packages through
    a .pth file, which Python reads after the environment's own packages, and
    which does not run the editable install's finder: every torchdeck module
    imported there is the installed copy."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "zz-test-dependencies.pth").write_text("\n".join(deps) + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    return venv


def run_installed(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, timeout=120, **kw)


def test_installed_console_opens_and_the_cli_answers(installed: Path, tmp_path: Path) -> None:
    python, exe = str(installed / "bin" / "python"), str(installed / "bin" / "torchdeck")
    help_out = run_installed(exe, "--help", cwd=tmp_path)
    assert help_out.returncode == 0, help_out.stderr
    assert "torchdeck init" in help_out.stdout
    # The console itself, from the installed copy: Pilot opens the runs screen
    # and the launch form, which need every screen, widget and stylesheet.
    code = f"""
import asyncio, sys
from pathlib import Path
import torchdeck
assert torchdeck.__file__.startswith({str(installed)!r}), torchdeck.__file__
from torchdeck.settings import Settings
from torchdeck.backends.local import LocalBackend
from torchdeck.tui.app import make_app
state = Path({str(tmp_path / "state")!r})
settings = Settings(state_dir=state, spec_file=state / "torchdeck.yaml")

async def main():
    app = make_app(settings, LocalBackend(state))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.5)
        first = type(app.screen).__name__
        await pilot.press("n")
        await pilot.pause(0.5)
        print(first, type(app.screen).__name__)
        mods = [m.__file__ for n, m in sys.modules.items() if n.startswith("torchdeck") and getattr(m, "__file__", None)]
        assert all(f.startswith({str(installed)!r}) for f in mods), [f for f in mods if {str(installed)!r} not in f]
        print(len(mods), "modules")

asyncio.run(main())
"""
    out = run_installed(python, "-c", code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    first_line = out.stdout.splitlines()[0]
    assert first_line == "HomeScreen LaunchScreen", out.stdout


def test_installed_trainer_runs_and_finds_its_data(installed: Path, tmp_path: Path) -> None:
    python = str(installed / "bin" / "python")
    code = (
        "import torchdeck, importlib.resources as r\n"
        "from torchdeck.trainer import train\n"
        "print(torchdeck.__file__)\n"
        "print((r.files('torchdeck') / 'docker' / 'Dockerfile.gpu').is_file())\n"
    )
    out = run_installed(python, "-c", code, cwd=tmp_path, check=True)
    path, has_data = out.stdout.split()
    assert path.startswith(str(installed)) and has_data == "True"
    help_out = run_installed(python, "-m", "torchdeck.trainer", "--help", cwd=tmp_path)
    assert help_out.returncode == 0 and "--checkpoint-every" in help_out.stdout
