"""The trained model as one file: written by rank 0 at the end, read by the
evaluate program. A local path or an ``s3://bucket/key`` URL; boto3 is
imported only for the latter.

The file is a dict: ``format`` ("torchdeck-model"), ``version``, ``model``
(the name ``build_model`` takes), ``state_dict``, ``classes``,
``standardise`` (how images were normalised), ``tta`` and ``accuracy``. A bare
state dict, as the seed workshop saved it, also loads when ``--model`` names
its network.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict, cast

import torch

from .checkpoint import atomic_write_bytes
from .errors import TrainerError
from .s3url import S3Url

FORMAT = "torchdeck-model"
VERSION = 1


def _object_of(url: str) -> tuple[str, str]:
    try:
        found = S3Url.parse_file(url)
    except ValueError as exc:
        raise TrainerError(str(exc)) from None
    return found.bucket, found.key


def s3_client() -> Any:
    """A boto3 S3 client, or a TrainerError saying boto3 is missing (it is optional in the trainer)."""
    try:
        import boto3
    except ImportError as exc:
        raise TrainerError(
            "s3:// model files need boto3, which is not installed",
            hint="pip install boto3, or give a local --model-file",
        ) from exc
    return boto3.client("s3")


def s3_error(action: str, url: str, exc: Exception) -> TrainerError:
    """An S3 failure as one line: what was tried, on which URL, and what S3 said."""
    error = getattr(exc, "response", None)
    said = error.get("Error") if isinstance(error, dict) else None
    detail = (said.get("Message") if isinstance(said, dict) else None) or str(exc).splitlines()[0]
    return TrainerError(
        f"cannot {action} {url}: {detail}", hint="check the bucket name, the region and that this pod's role may use it"
    )


class ModelFile(TypedDict, total=False):
    """A model file as torchdeck writes it (a bare state dict reads as its ``state_dict`` alone)."""

    format: str
    version: int
    model: str
    state_dict: dict[str, torch.Tensor]
    classes: list[str]
    standardise: bool
    tta: bool
    accuracy: float | None
    epochs: int
    steps: int


def save_model(location: str, payload: Mapping[str, object]) -> int:
    """Write the model file; returns its size in bytes."""
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "version": VERSION, **payload}, buf)
    data = buf.getvalue()
    if S3Url.is_s3(location):
        bucket, key = _object_of(location)
        client = s3_client()
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data)
        except Exception as exc:  # botocore's errors; boto3 is optional so its classes are not imported here
            raise s3_error("upload the model to", location, exc) from exc
        return len(data)
    path = Path(location).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return atomic_write_bytes(path, lambda f: f.write(data))
    except OSError as exc:
        raise TrainerError(
            f"cannot write model file {path}: {exc.strerror or exc}", hint="choose a writable --model-file"
        ) from exc


def load_model_file(location: str) -> ModelFile:
    """Read a model file (torchdeck's format or a bare state dict, which comes
    back as ``{"state_dict": ...}`` with no model name)."""
    if S3Url.is_s3(location):
        bucket, key = _object_of(location)
        client = s3_client()
        try:
            data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as exc:
            raise s3_error("download", location, exc) from exc
        source: Any = io.BytesIO(data)
    else:
        source = Path(location).expanduser()
        if not source.is_file():
            raise TrainerError(
                f"model file {source} does not exist", hint="train first, or pass the path the trainer printed"
            )
    try:
        obj = torch.load(source, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise TrainerError(
            f"{location} is not a readable model file ({exc.__class__.__name__})",
            hint="it may be truncated; train again or copy it whole",
        ) from exc
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        return cast(ModelFile, obj)  # torchdeck's own format, written by save_model
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return {"state_dict": obj}
    raise TrainerError(f"{location} holds no model weights")


def describe_mismatch(model_name: str, error: RuntimeError) -> TrainerError:
    """A one-line error for weights that belong to another network."""
    first = str(error).splitlines()
    detail = first[1].strip() if len(first) > 1 else first[0][:160]
    return TrainerError(
        f"the model file's weights do not fit model '{model_name}': {detail}",
        hint="pass the --model the file was trained with",
    )


def copy_model_file(source: str, target: str) -> int:
    """Copy a model file byte for byte between a path and s3:// (either way); returns its size.
    The model-copy job runs this on the shared volume so a model can leave the cluster through S3."""
    if S3Url.is_s3(source):
        bucket, key = _object_of(source)
        try:
            data = s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as exc:
            raise s3_error("download", source, exc) from exc
    else:
        try:
            data = Path(source).expanduser().read_bytes()
        except OSError as exc:
            raise TrainerError(
                f"cannot read {source}: {exc.strerror or exc}",
                hint="is the path on the shared volume, and did training finish?",
            ) from exc
    if S3Url.is_s3(target):
        bucket, key = _object_of(target)
        try:
            s3_client().put_object(Bucket=bucket, Key=key, Body=data)
        except Exception as exc:
            raise s3_error("upload to", target, exc) from exc
    else:
        path = Path(target).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, lambda f: f.write(data))
    return len(data)


def main(argv: list[str] | None = None) -> int:
    """``python -m torchdeck.trainer.model_file --copy SOURCE TARGET``; prints one JSON line."""
    import argparse
    import sys

    from .metrics import tool_line

    p = argparse.ArgumentParser(prog="python -m torchdeck.trainer.model_file")
    p.add_argument(
        "--copy", nargs=2, metavar=("SOURCE", "TARGET"), required=True, help="a path or s3://bucket/key each"
    )
    a = p.parse_args(argv)
    try:
        size = copy_model_file(*a.copy)
    except TrainerError as exc:
        print(f"torchdeck.trainer.model_file: error: {exc}", file=sys.stderr)
        print(tool_line("model_file", error=exc))
        return 2
    print(tool_line("model_file", {"source": a.copy[0], "target": a.copy[1], "bytes": size}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
