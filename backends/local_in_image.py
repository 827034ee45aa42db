"""A local run with every rank inside the training image (``local_image`` in the spec, ``train
--in-image IMAGE``): the torchrun command the local backend would run, run by ``docker run`` (or
podman) in the image, as a pod runs it, so that a missing package or a wrong path shows here
before an hour of cluster time is spent.

- the image's own ``python`` and torchrun, the pods' working directory: the user's code folder at
  the pods' path (``bundle.CODE_DIR``, its ``workdir`` within it) with the same ``PYTHONPATH``, or
  the image's copy of it (``entrypoint.in_image``, a ``--code`` image);
- the run folder mounted read-only at its own path, and only what the ranks write in it (logs,
  metrics, checkpoints) read-write, with the data folder and the checkpoint folder, so that the
  monitor and every command read the run as a local one; the code a copy (``copy_code``), as a
  pod's is, so the image's code never writes the user's sources;
- the host's network with the rendezvous on 127.0.0.1 and ``--local-addr 127.0.0.1``: no name is
  looked up inside the container;
- the environment passed by name only (``-e NAME``: the values never reach a command line), the
  caller's user and group (the files it writes are theirs), ``/dev/shm`` the spec's size."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .bundle import CODE_DIR, code_files
from .engine import Engine, find_engine, no_engine_hint
from .errors import BackendError
from .kubernetes.client import quantity
from .spec import JobSpec


def container_name(run_id: str) -> str:
    return f"torchdeck-{run_id}"


def engine_for_runs() -> Engine:
    engine = find_engine()
    if engine is None:
        raise BackendError("local_image needs a container engine, and none answers here", no_engine_hint())
    return engine


def code_paths(spec: JobSpec, copy: Path | None = None) -> tuple[str, str, list[str]]:
    """(the code folder as the ranks see it, their working directory, the mounts it needs): the
    user's folder read-only, or ``copy`` of it (``copy_code``) read-write, as a pod has its own."""
    e = spec.entrypoint
    if e.in_image:  # the image's copy (a --code image): nothing of this machine's
        root = e.in_image
        return root, str(Path(root) / (e.workdir or "")), []
    mount = f"{copy}:{CODE_DIR}" if copy is not None else f"{e.code}:{CODE_DIR}:ro"
    return CODE_DIR, str(Path(CODE_DIR) / (e.workdir or "")), ["--volume", mount]


def copy_code(code: str, into: Path) -> Path:
    """The files of the code folder that a pod would get (the bundle's: ignore files honoured, no
    links), copied into ``into``: the image's code writes its logs beside its script, as in a pod,
    and cannot touch the user's sources or their ``.git``."""
    root = Path(code)
    for path in code_files(root):
        target = into / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        shutil.copymode(path, target)
    into.mkdir(parents=True, exist_ok=True)
    return into


RUN_WRITES = ("metrics", "logs")
"""What ranks in the image write in the run's folder (and its ``checkpoints`` where the spec names
no other place); the rest of the folder (its records, the launcher's log) is mounted read-only."""


def writable_folders(spec: JobSpec, run_dir: Path) -> list[str]:
    """The folders the ranks in the image write (mounted read-write), in order."""
    run = run_dir.resolve()
    folders = {str(run / name) for name in RUN_WRITES}
    if not spec.checkpoint_dir:
        folders.add(str(run / "checkpoints"))
    if spec.builtin:
        folders.add(str(Path(spec.data_dir).expanduser().resolve()))
        if spec.checkpoint_dir and "://" not in spec.checkpoint_dir:
            folders.add(str(Path(spec.checkpoint_dir).expanduser().resolve()))
    return sorted(folders)


def prepare_in_image(spec: JobSpec, run_dir: Path) -> None:
    """What ``in_image_command``'s mounts need on this machine, made when the run starts (a plan
    makes nothing): the folders the ranks write, and the copy of the code folder (``copy_code``)."""
    for folder in writable_folders(spec, run_dir):
        Path(folder).mkdir(parents=True, exist_ok=True)
    if not spec.builtin:
        copy_code(spec.entrypoint.code, run_dir.resolve() / "code")


def in_image_command(
    spec: JobSpec, run_dir: Path, torchrun: list[str], env: dict[str, str], engine: Engine | None = None
) -> list[str]:
    """``docker run`` of ``torchrun`` (the arguments after ``python -m torch.distributed.run``, the
    rank's command included) in ``spec.local_image``; nothing is made (``prepare_in_image`` makes
    what its mounts need)."""
    assert spec.local_image is not None
    engine = engine or engine_for_runs()
    run = run_dir.resolve()
    if spec.builtin:
        mounts: list[str] = []
        workdir = str(run)
    else:
        _, workdir, mounts = code_paths(spec, run / "code")
    mounts += ["--volume", f"{run}:{run}:ro"]  # the records: the image's code reads, never writes them
    for folder in writable_folders(spec, run_dir):
        mounts += ["--volume", f"{folder}:{folder}"]
    shm = int(quantity(spec.resources.shm_size)) or 1 << 30
    return [
        engine.binary,
        "run",
        "--rm",
        "--name",
        container_name(run_dir.name),
        "--network",
        "host",
        "--user",
        f"{os.getuid()}:{os.getgid()}",
        "--shm-size",
        str(shm),
        "--workdir",
        workdir,
        *mounts,
        *[x for name in sorted(env) for x in ("--env", name)],
        "--env",
        "HOME=/tmp",
        "--entrypoint",
        "torchrun",
        "--",  # whatever the image is called, it is no option
        spec.local_image,
        "--local-addr",
        "127.0.0.1",
        *torchrun,
    ]


def rank_command(spec: JobSpec, metrics_file: str, trainer_args: list[str]) -> list[str]:
    """What each rank runs inside the image: the built-in trainer, or the user's code through the
    rank wrapper (``rank_output``, which the image's torchdeck carries), with the image's python."""
    if spec.builtin:
        return ["sh", "-c", 'exec "$@" 2>&1', "sh", "python", "-u", "-m", "torchdeck.trainer", *trainer_args]
    e = spec.entrypoint
    root, _, _ = code_paths(spec)
    program = [str(Path(root) / e.script)] if e.script else ["-m", str(e.module)]
    wrapper = ["python", "-m", "torchdeck.backends.rank_output", metrics_file, spec.metrics.pattern or "", "--"]
    return [*wrapper, "python", "-u", *program, *e.args]
