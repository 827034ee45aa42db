"""CIFAR-10 on disk, in memory, and in batches.

The data set lives as uint8 tensors for its whole life; a batch becomes float
only when it is drawn, and augmentation (padded random crop, horizontal flip)
runs on the whole batch tensor at once rather than image by image in Python.
Reads the "python version" layout (``cifar-10-batches-py/``) that the seeds
and the official archive use, in either pickle key style.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import pickle
import pickletools
import shutil
import stat
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .errors import TrainerError
from .s3url import S3Url

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

# Per-channel statistics of the CIFAR-10 training set, on the 0..255 scale.
MEAN = (125.31, 122.95, 113.87)
STD = (62.99, 62.09, 66.70)


def normalisation(standardise: bool) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Channel mean and std to normalise by: CIFAR-10's statistics, or plain
    scaling to [0, 1] as the seed workshop did."""
    return (MEAN, STD) if standardise else ((0.0, 0.0, 0.0), (255.0, 255.0, 255.0))


@dataclass
class ImageSet:
    """Images as uint8 (N, 3, 32, 32) and labels as int64 (N,)."""

    images: torch.Tensor
    labels: torch.Tensor
    classes: tuple[str, ...] = CLASSES

    def __len__(self) -> int:
        return len(self.labels)


def find_batches_dir(data_dir: str | os.PathLike) -> Path:
    """The folder holding the batch files: ``data_dir`` itself or its ``cifar-10-batches-py``."""
    root = Path(data_dir).expanduser()
    for candidate in (root / FOLDER, root):
        if (candidate / TEST_FILE).is_file() or (candidate / TRAIN_FILES[0]).is_file():
            return candidate
    if not root.exists():
        raise TrainerError(
            f"data dir {root} does not exist", hint="pass --download to fetch CIFAR-10 there, or --dataset synthetic"
        )
    raise TrainerError(
        f"no CIFAR-10 batches in {root} (expected {FOLDER}/data_batch_1 ... test_batch)",
        hint="pass --download to fetch CIFAR-10 there, or point --data-dir at the folder that holds them",
    )


# What a CIFAR-10 batch pickle may name: a numpy array and its dtype (numpy 1
# and 2 spell the module differently), and the latin-1 encoder that a protocol-2
# pickle written by Python 3 uses for bytes. Anything else (os.system, eval,
# builtins) is refused before it is called: batches come from S3, shared volumes
# and folders that anyone with write access there could have replaced.
_PICKLE_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles plain data and numpy arrays only; never runs code named by the file."""

    def find_class(self, module: str, name: str) -> object:
        if (module, name) in _PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which a CIFAR-10 batch never does")


MAX_PICKLE_BYTES = 512 * 2**20
"""A CIFAR-10 batch is 31 MB (CIFAR-100's training file 155 MB): a larger file is not one."""


def load_pickle(path: Path, encoding: str) -> object:
    """Read one CIFAR-10 pickle (a batch or batches.meta) without running code from it, and without
    believing the sizes it claims: the file is read whole (a regular file of at most
    MAX_PICKLE_BYTES), and every length an opcode gives is checked against what the file holds
    before the unpickler allocates it (a header claiming 2**50 bytes was a MemoryError)."""
    with open(path, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise pickle.UnpicklingError("it is not a regular file")
        data = f.read(MAX_PICKLE_BYTES + 1)
    if len(data) > MAX_PICKLE_BYTES:
        raise pickle.UnpicklingError(f"it is over {MAX_PICKLE_BYTES // 2**20} MiB")
    for _ in pickletools.genops(io.BytesIO(data)):  # reads each length against the bytes left: ValueError
        pass
    try:
        return _BatchUnpickler(io.BytesIO(data), encoding=encoding).load()
    except MemoryError:
        raise pickle.UnpicklingError("it asks for more memory than this machine has") from None


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        raw = load_pickle(path, "bytes")
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError) as exc:
        raise TrainerError(
            f"cannot read CIFAR-10 batch {path}: {exc}",
            hint="the file is damaged or is not CIFAR-10; delete it and run again with --download",
        ) from exc
    if not isinstance(raw, dict):
        raise TrainerError(f"{path} is not a CIFAR-10 batch (a {type(raw).__name__}, not a dict)")
    # Key style depends on how the pickle was written: b"data" (Python 2) or "data".
    batch = {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in raw.items()}
    if "data" not in batch or "labels" not in batch:
        raise TrainerError(f"{path} is not a CIFAR-10 batch (keys: {sorted(batch)[:5]})")
    data = np.asarray(batch["data"], dtype=np.uint8)
    labels = np.asarray(batch["labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
        raise TrainerError(f"{path} has data of shape {data.shape} for {len(labels)} labels (expected (N, 3072))")
    if len(labels) and (labels.min() < 0 or labels.max() >= len(CLASSES)):
        raise TrainerError(f"{path} has labels outside 0..9")
    return data, labels


def load_cifar10(data_dir: str | os.PathLike, train: bool) -> ImageSet:
    """Load the training batches (those present of 1..5) or the test batch."""
    folder = find_batches_dir(data_dir)
    names = TRAIN_FILES if train else (TEST_FILE,)
    found = [folder / n for n in names if (folder / n).is_file()]
    if not found:
        raise TrainerError(
            f"{folder} has no {'training batches (data_batch_1..5)' if train else 'test_batch'}",
            hint="pass --download to fetch the whole data set",
        )
    parts = [_read_batch(p) for p in found]
    data = np.concatenate([d for d, _ in parts])
    labels = np.concatenate([lab for _, lab in parts])
    classes = CLASSES
    meta = folder / "batches.meta"
    if meta.is_file():
        try:
            names_raw = load_pickle(meta, "latin1").get("label_names")  # type: ignore[attr-defined]
            if names_raw and len(names_raw) == len(CLASSES):
                classes = tuple(
                    n.decode() if isinstance(n, bytes) else str(n)  # type: ignore[assignment]
                    for n in names_raw
                )
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError, IndexError, KeyError):
            pass  # the names are a courtesy; the standard ones are correct for CIFAR-10
    images = torch.from_numpy(data.reshape(-1, 3, 32, 32).copy())
    return ImageSet(images, torch.from_numpy(labels), classes)


def synthetic_cifar10(n: int, seed: int = 0) -> ImageSet:
    """A learnable stand-in with CIFAR-10's shapes: each class has its own
    colour and a stripe; for smoke tests and throughput runs without data."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, len(CLASSES), (n,), generator=g)
    base = torch.randint(0, 256, (len(CLASSES), 3, 1, 1), generator=g).float()
    images = base[labels].expand(n, 3, 32, 32).clone()
    rows = torch.arange(32)
    stripe = (rows[None, :] // 4 == labels[:, None] % 8).float()[:, None, :, None] * 60
    images = images + stripe + torch.randn(n, 3, 32, 32, generator=g) * 40
    return ImageSet(images.clamp(0, 255).to(torch.uint8), labels)


def _complete(folder: Path) -> bool:
    return (folder / TEST_FILE).is_file() and all((folder / n).is_file() for n in TRAIN_FILES)


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (flock: between processes on
    this machine, and across nodes on NFS/EFS volumes that support locks)."""
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def download_cifar10(
    data_dir: str | os.PathLike, url: str = CIFAR10_URL, md5: str = CIFAR10_MD5, timeout: float = 30.0
) -> Path:
    """Fetch the official archive into ``data_dir``, verify its checksum and
    unpack it atomically: the batches folder appears whole or not at all.
    Every rank may call this at once: the first fetches under a lock, the
    others wait and find the data there."""
    root = Path(data_dir).expanduser()
    target = root / FOLDER
    if _complete(target):
        return target
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TrainerError(f"cannot create data dir {root}: {exc.strerror}") from exc
    with _exclusive(root / ".download.lock"):
        if not _complete(target):
            _fetch_and_unpack(root, target, url, md5, timeout)
    return target


def _say(line: str) -> None:
    """A progress line on stderr (the data-prep job's log, which the console follows)."""
    import sys

    print(f"torchdeck.trainer.data: {line}", file=sys.stderr, flush=True)


def _fetch_and_unpack(root: Path, target: Path, url: str, md5: str, timeout: float) -> None:
    with tempfile.TemporaryDirectory(dir=root, prefix=".download-") as tmp:
        archive = Path(tmp) / "cifar-10-python.tar.gz"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp, open(archive, "wb") as out:
                total, done, said = int(resp.headers.get("Content-Length") or 0), 0, -1
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
                    done += len(chunk)
                    tenth = 10 * done // total if total else -1
                    if tenth > said:
                        _say(f"downloaded {done / 1e6:.0f}/{total / 1e6:.0f} MB")
                        said = tenth
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise TrainerError(
                f"cannot download CIFAR-10 from {url}: {reason}",
                hint="this machine may have no network; copy cifar-10-batches-py/ into --data-dir",
            ) from exc
        _unpack_verified(archive, Path(tmp), target, md5)


def _unpack_verified(archive: Path, tmp: Path, target: Path, md5: str) -> None:
    """Check the archive's md5, unpack it beside ``target`` and move it into place in one step."""
    digest = hashlib.md5()
    with open(archive, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != md5:
        raise TrainerError(
            f"the archive has md5 {digest.hexdigest()}, expected {md5}",
            hint="the copy was damaged or is not the official CIFAR-10 archive; fetch it again",
        )
    _say(f"checksum ok (md5 {md5})")
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise TrainerError(f"cannot unpack CIFAR-10 archive: {exc}") from exc
    unpacked = tmp / FOLDER
    if not _complete(unpacked):
        raise TrainerError(f"the archive holds no complete {FOLDER}/")
    if target.exists():
        shutil.rmtree(target)  # a partial folder from an older, non-atomic copy
    os.replace(unpacked, target)


def copy_from_s3(url: str, data_dir: str | os.PathLike, md5: str = CIFAR10_MD5) -> Path:
    """Put CIFAR-10 into ``data_dir`` from an S3 prefix holding either the official archive
    (cifar-10-python.tar.gz, verified by md5) or the unpacked cifar-10-batches-py/ files."""
    try:
        location = S3Url.parse(url)
    except ValueError as exc:
        raise TrainerError(str(exc), hint="e.g. s3://my-bucket/datasets/cifar10/") from None
    bucket, prefix = location.bucket, location.key
    root = Path(data_dir).expanduser()
    target = root / FOLDER
    if _complete(target):
        _say(f"{target} is complete already")
        return target
    from .model_file import s3_client, s3_error

    s3 = s3_client()
    try:
        objects = [
            o
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])
            if not o["Key"].endswith("/")
        ]
    except Exception as exc:
        raise s3_error("list", url, exc) from exc
    archive = next((o for o in objects if o["Key"].endswith("cifar-10-python.tar.gz")), None)
    # only the batch files themselves, by name: a key such as FOLDER/../../x must not write outside data_dir
    known = {*TRAIN_FILES, TEST_FILE, "batches.meta", "readme.html"}
    batches = [o for o in objects if f"{FOLDER}/" in o["Key"] and o["Key"].rsplit(f"{FOLDER}/", 1)[1] in known]
    if archive is None and not batches:
        raise TrainerError(
            f"{url} holds neither cifar-10-python.tar.gz nor {FOLDER}/",
            hint="upload one of them there, or prepare without --from-s3 (the official archive)",
        )
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root / ".download.lock"), tempfile.TemporaryDirectory(dir=root, prefix=".download-") as tmp:
        if _complete(target):
            return target
        chosen = [archive] if archive else batches
        total = sum(o["Size"] for o in chosen)
        done = 0
        for i, obj in enumerate(chosen, 1):
            where = Path(tmp) / (
                obj["Key"].rsplit("/", 1)[-1] if archive else f"{FOLDER}/" + obj["Key"].rsplit(f"{FOLDER}/", 1)[1]
            )
            where.parent.mkdir(parents=True, exist_ok=True)
            try:
                s3.download_file(bucket, obj["Key"], str(where))
            except Exception as exc:
                raise s3_error("copy", str(S3Url(bucket, obj["Key"])), exc) from exc
            done += obj["Size"]
            _say(f"copied {i}/{len(chosen)} objects, {done / 1e6:.1f}/{total / 1e6:.1f} MB")
        if archive:
            _unpack_verified(where, Path(tmp), target, md5)
        else:
            unpacked = Path(tmp) / FOLDER
            if not _complete(unpacked):
                raise TrainerError(f"{url} has an incomplete {FOLDER}/ (data_batch_1..5 and test_batch are needed)")
            if target.exists():
                shutil.rmtree(target)
            os.replace(unpacked, target)
    return target


class ShardedSampler:
    """Splits indices over ranks the way ``DistributedSampler`` does: each
    epoch one permutation (seeded by seed + epoch, the same on every rank),
    padded to a multiple of the world size, rank r taking every world_size-th
    index from r. Call ``set_epoch`` before each epoch."""

    def __init__(self, n: int, rank: int, world_size: int, seed: int = 0):
        self.n, self.rank, self.world_size, self.seed = n, rank, world_size, seed
        self.epoch = 0
        self.per_rank = -(-n // world_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def indices(self) -> torch.Tensor:
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        total = self.per_rank * self.world_size
        if total > self.n:
            order = torch.cat((order, order[: total - self.n]))
        return order[self.rank : total : self.world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.per_rank


class BatchPipeline:
    """Turns index batches into normalised float batches, augmenting on the
    whole batch: random translation by up to ``crop_pad`` pixels (reflection
    padding) and a horizontal flip that alternates per image across epochs,
    so that each image is seen both ways in any two consecutive epochs."""

    def __init__(
        self,
        data: ImageSet,
        augment: bool,
        crop_pad: int = 4,
        seed: int = 0,
        rank: int = 0,
        channels_last: bool = False,
        device: torch.device | str = "cpu",
        mean: tuple[float, ...] = MEAN,
        std: tuple[float, ...] = STD,
    ):
        self.data, self.augment, self.crop_pad = data, augment, crop_pad
        self.device = torch.device(device)
        self.channels_last = channels_last
        self.mean = torch.tensor(mean, device=self.device).view(1, 3, 1, 1)
        self.inv_std = (1 / torch.tensor(std, device=self.device)).view(1, 3, 1, 1)
        # The flip pattern belongs to the image, not the rank, so it alternates
        # whichever rank draws the image; the crop offsets differ per rank.
        self.flip_base = torch.randint(
            0, 2, (len(data),), generator=torch.Generator().manual_seed(seed + 7919), dtype=torch.bool
        )
        self.crop_seed = (seed * 65_537 + rank) * 1_000_003

    def normalise(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images to normalised float on the pipeline's device."""
        return (images.to(self.device, non_blocking=True).float() - self.mean) * self.inv_std

    def batch(self, idx: torch.Tensor, epoch: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The images and labels at ``idx``, augmented for ``epoch``/``step`` if enabled."""
        labels = self.data.labels[idx].to(self.device, non_blocking=True)
        x = self.normalise(self.data.images[idx])
        if self.augment:
            flip = self.flip_base[idx] ^ bool(epoch % 2)
            x = torch.where(flip.to(self.device)[:, None, None, None], x.flip(3), x)
            x = random_translate(
                x, self.crop_pad, torch.Generator().manual_seed(self.crop_seed + epoch * 10_007 + step)
            )
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, labels


def random_translate(x: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """Crop each image of a batch at its own random offset from a
    reflection-padded copy: two gathers, no Python loop over images."""
    if pad <= 0:
        return x
    n, c, h, w = x.shape
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad), mode="reflect")
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(x.device)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(x.device)
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None].expand(n, c, h, w + 2 * pad)
    out = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :].expand(n, c, h, w)
    return out.gather(3, cols)


def main(argv: list[str] | None = None) -> int:
    """``python -m torchdeck.trainer.data``: put CIFAR-10 into a folder (the
    data-prep job on a cluster's shared volume does this) and check it;
    prints one JSON line saying what is there."""
    import argparse
    import sys

    from .metrics import tool_line

    p = argparse.ArgumentParser(
        prog="python -m torchdeck.trainer.data", description="Fetch CIFAR-10 into a folder (once) and check it."
    )
    p.add_argument("--data-dir", required=True, help="where cifar-10-batches-py/ goes")
    p.add_argument("--url", default=CIFAR10_URL, help="the archive to fetch (a mirror)")
    p.add_argument("--md5", default=CIFAR10_MD5, help="its checksum")
    p.add_argument("--from-s3", metavar="URL", help="copy from this S3 prefix instead (the archive or the batches)")
    a = p.parse_args(argv)
    try:
        folder = copy_from_s3(a.from_s3, a.data_dir, a.md5) if a.from_s3 else download_cifar10(a.data_dir, a.url, a.md5)
        train, test = load_cifar10(a.data_dir, train=True), load_cifar10(a.data_dir, train=False)
    except TrainerError as exc:
        print(f"torchdeck.trainer.data: error: {exc}", file=sys.stderr)
        print(tool_line("data", error=exc))
        return 2
    found = {"path": str(folder), "train_images": len(train), "test_images": len(test), "classes": list(train.classes)}
    print(tool_line("data", found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
