"""Issue 32: the training image on a real Docker engine (Debian's docker.io: no buildx plugin), with
no registry and no AWS. ``scripts/docker-engine.sh`` installs and starts the engine once and makes
the base image from Debian's mirror (the one stand-in: for the registry); then, through the CLI as a
user runs it: both Dockerfiles build (torch's CPU wheel from this machine's wheel folder, served to
the build, with PyPI behind the proxy for the rest), an unchanged rebuild finds its image, the
built-in trainer and a user's script train inside the image with every rank there (as the pods run
them), a ``--code`` image is built on it and run, and a stop leaves no container behind. Where the
machine cannot run an engine the module skips, saying what is missing; the engine is stopped after."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from local_runs import cli_env, run_cli
from trainer_runs import REPO

from torchdeck.backends.local import LocalBackend

ENGINE = REPO / "scripts" / "docker-engine.sh"
SHARED_DATA = REPO.parent / "shared" / "data" / "cifar10-subset"
TORCH_VERSION = (REPO / "docker" / "torch-version").read_text().strip()
NO_AWS = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # any AWS call fails at once
    "AWS_ACCESS_KEY_ID": "none",
    "AWS_SECRET_ACCESS_KEY": "none",
    "AWS_DEFAULT_REGION": "us-east-1",
}
BUILD_FROM_HERE = ("--torch-index", "https://pypi.org/simple")
"""The index the build would ask were it not given a folder: with ``--torch-wheels`` every package
comes from this machine's folder and no index is asked (the build reaches nothing but 127.0.0.1)."""


def torch_wheels() -> Path | None:
    """The wheel folder the images are built from: the one ``scripts/test`` fills once, outside the
    work tree (torch, as setup installs it here, and what the image installs beside it)."""
    default = Path.home() / ".cache" / "torchdeck" / "wheels" / f"torch-{TORCH_VERSION}"
    for folder in (os.environ.get("TORCHDECK_IMAGE_WHEELS"), default):
        if folder and any(Path(folder).glob(f"torch-{TORCH_VERSION}[-+]*.whl")):
            return Path(folder)
    return None


def is_wheel_version(version: str, wheels: Path) -> bool:
    """Whether ``version`` (torch.__version__ in the image) is the folder's wheel: 2.13.0+cpu from
    PyTorch's CPU build, 2.13.0+cu130 from PyPI's (whose file name says 2.13.0)."""
    (wheel,) = wheels.glob(f"torch-{TORCH_VERSION}[-+]*.whl")
    named = wheel.name.split("-")[1]
    return version == named if "+" in named else version.partition("+")[0] == named


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    wheels = torch_wheels()
    if wheels is None:
        pytest.skip(f"no torch {TORCH_VERSION} wheel folder here (scripts/test fills one) to build the image from")
    started = time.monotonic()
    done = subprocess.run([str(ENGINE), "start"], capture_output=True, text=True, timeout=600)
    if done.returncode == 3:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stdout + done.stderr
    print(f"engine and base image ready in {time.monotonic() - started:.1f} s")
    host = done.stdout.strip().rpartition("DOCKER_HOST=")[2]
    state = tmp_path_factory.mktemp("state")
    env = {**cli_env(state), **NO_AWS, "DOCKER_HOST": host}
    yield env, wheels, state
    subprocess.run([str(ENGINE), "stop"], timeout=120)
    gone = subprocess.run(["docker", "version"], env=env, capture_output=True, text=True, timeout=60)
    assert "Server" not in gone.stdout  # the engine is stopped


def cli(env: dict[str, str], *args: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    done = run_cli(list(args), env, cwd, timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def built_name(output: str) -> str:
    (line,) = [line for line in output.splitlines() if "run a job in it: torchdeck train --in-image" in line]
    return line.split("--in-image ", 1)[1].split()[0]


@pytest.fixture(scope="module")
def cpu_image(engine) -> str:
    """The CPU image, built through the engine's builder in every run: an image this machine holds
    from an earlier run loses its tag first (its layers stay: the engine's cache)."""
    env, wheels, _ = engine
    name = built_name(cli(env, "image", "build", "--no-push", "--torch-wheels", str(wheels), *BUILD_FROM_HERE).stdout)
    untag = ["docker", "rmi", "--no-prune", name]
    subprocess.run(untag, env=env, capture_output=True, text=True, timeout=120, check=True)
    done = cli(env, "image", "build", "--no-push", "--torch-wheels", str(wheels), *BUILD_FROM_HERE)
    assert "docker (the plain builder: no buildx here)" in done.stdout  # Debian's docker has no buildx
    assert "building docker/Dockerfile.cpu as" in done.stdout and "Successfully tagged" in done.stdout
    assert built_name(done.stdout) == name
    return name


def test_the_cpu_image_builds_with_no_buildx_registry_or_aws_and_an_unchanged_rebuild_builds_nothing(engine, cpu_image):
    env, wheels, _ = engine
    assert cpu_image.startswith("torchdeck-trainer:ctx-") and cpu_image.endswith("-cpu")
    started = time.monotonic()
    again = cli(env, "image", "build", "--no-push", "--torch-wheels", str(wheels), *BUILD_FROM_HERE)
    print(f"unchanged rebuild: {time.monotonic() - started:.2f} s")
    assert f"{cpu_image} is built here already" in again.stdout and built_name(again.stdout) == cpu_image
    # from a folder no index is asked: naming none (or another) is the same image, not one more torch
    plain = cli(env, "image", "build", "--no-push", "--torch-wheels", str(wheels))
    assert f"{cpu_image} is built here already" in plain.stdout, plain.stdout[-800:]
    versions = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python", cpu_image, "-c",
         "import torch, numpy, torchdeck.trainer; print(torch.__version__)"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert is_wheel_version(versions.stdout.strip(), wheels), versions.stdout + versions.stderr
    # the image's own command (a pod's default), with no network at all: its rendezvous needs no
    # name lookup; a short synthetic run after the command's own arguments
    command = json.loads(
        subprocess.run(
            ["docker", "image", "inspect", "--format", "{{json .Config.Cmd}}", cpu_image],
            env=env, capture_output=True, text=True, timeout=60,
        ).stdout
    )  # fmt: skip
    trained = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", cpu_image, *command,
         "--dataset", "synthetic", "--max-steps", "2", "--batch-size", "16"],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert trained.returncode == 0 and '"event":"done"' in trained.stdout, trained.stdout[-500:] + trained.stderr[-500:]


def test_the_gpu_dockerfile_builds_with_the_torch_index_as_an_argument(engine):
    """The GPU image's Dockerfile, built here with torch's CPU wheel (no GPU here): what it installs
    and how torchdeck goes in, as on a cluster."""
    env, wheels, _ = engine
    done = cli(env, "image", "build", "--no-push", "--gpu", "--torch-wheels", str(wheels), *BUILD_FROM_HERE)
    name = built_name(done.stdout)
    assert name.endswith("-gpu")
    found = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python", name, "-c",
         "import pynvml, torchdeck.trainer; print('ok')"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert found.stdout.strip() == "ok", found.stderr


def test_the_built_in_trainer_trains_inside_the_image_and_a_stop_leaves_no_container(engine, cpu_image):
    env, _, state = engine
    done = cli(
        env, "train", "--in-image", cpu_image, "--data-dir", str(SHARED_DATA), "--max-steps", "4",
        "--batch-size", "32", "--nproc-per-node", "2", "--name", "inimage",
    )  # fmt: skip
    shown = json.loads(cli(env, "status", "--output", "json", last_run(state, "inimage")).stdout)
    assert shown["state"] == "succeeded" and shown["step"] == 4 and [r["rank"] for r in shown["ranks"]] == [0, 1]
    launch = json.loads((Path(shown["location"]) / "launch.json").read_text())
    assert launch["cmd"][1:3] == ["run", "--rm"] and cpu_image in launch["cmd"] and "--local-addr" in launch["cmd"]
    assert "succeeded" in done.stdout
    # a long run, stopped: torchrun in the container ends, and the container is removed
    cli(env, "train", "--in-image", cpu_image, "--data-dir", str(SHARED_DATA), "--epochs", "30",
        "--name", "stopped", "--detach")  # fmt: skip
    run_id = last_run(state, "stopped")
    container = f"torchdeck-{run_id}"
    wait_for(lambda: running(env, container), "the run's container to start")
    # the monitor sees the ranks' processes inside the container, as a local run's
    backend = LocalBackend(state)
    wait_for(lambda: [p.rank for p in backend.node_metrics(run_id)[0].processes] == [0, 1], "both ranks' processes")
    cli(env, "stop", run_id)
    wait_for(lambda: not running(env, container), "the container to go")
    assert json.loads(cli(env, "status", "--output", "json", run_id).stdout)["state"] == "cancelled"


USER_SCRIPT = """
import os, sys
import torch, torch.distributed as dist
from helpers import TARGET  # the project's own module, beside the script

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
print(f"python {sys.executable} in {os.getcwd()}", flush=True)
for step in range(1, 9):
    x = torch.randn(8, 4)
    loss = ((model(x) - TARGET * x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    print(f"step {step}/8 loss: {loss.item():.4f}", flush=True)
dist.destroy_process_group()
"""


def test_a_users_script_runs_inside_the_image_from_the_code_folder_and_from_a_code_image(engine, cpu_image, tmp_path):
    env, wheels, state = engine
    code = tmp_path / "project"
    code.mkdir()
    (code / "train.py").write_text(USER_SCRIPT)
    (code / "helpers.py").write_text("TARGET = 2.0\n")
    # the code folder mounted where the pods unpack it
    cli(env, "train", "train.py", "--in-image", cpu_image, "--nproc-per-node", "2", cwd=code)
    shown = json.loads(cli(env, "status", "--output", "json", last_run(state, "train")).stdout)
    assert shown["state"] == "succeeded" and (shown["step"], shown["total_steps"]) == (8, 8)
    log = rank_log(Path(shown["location"]))
    assert "in /workspace/code" in log and "/usr/bin/python" in log  # the image's python, the pods' folder
    # a package the image lacks: one line naming the image, before anything starts
    (code / "needs.py").write_text("import wandb\n")
    refused = run_cli(["train", "needs.py", "--in-image", cpu_image], env, code)
    assert refused.returncode != 0 and f"which the image {cpu_image} cannot import" in refused.stderr
    (code / "needs.py").unlink()
    # the code built into an image of its own (--code), and run from the image's copy
    built = cli(
        env, "image", "build", "--no-push", "--torch-wheels", str(wheels), *BUILD_FROM_HERE, "--code", str(code)
    )
    name = built_name(built.stdout)
    assert name.startswith("torchdeck-trainer:code-") and "--set entrypoint.in_image=/opt/code" in built.stdout
    cli(env, "train", "train.py", "--in-image", name, "--set", "entrypoint.in_image=/opt/code", "--name", "coded",
        cwd=code)  # fmt: skip
    shown = json.loads(cli(env, "status", "--output", "json", last_run(state, "coded")).stdout)
    assert shown["state"] == "succeeded" and shown["step"] == 8
    assert "in /opt/code" in rank_log(Path(shown["location"]))


def last_run(state: Path, name: str) -> str:
    return sorted(p.name for p in (state / "runs").iterdir() if p.name.startswith(name + "-"))[-1]


def rank_log(run_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in run_dir.glob("logs/*/attempt_0/0/stdout.log"))


def running(env: dict[str, str], name: str) -> bool:
    found = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"name={name}"], env=env, capture_output=True, text=True, timeout=60
    )
    return bool(found.stdout.strip())


def wait_for(condition, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.5)
