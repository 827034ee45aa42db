"""The CIFAR-10 loader, the sharded sampler, batch augmentation and download."""

from __future__ import annotations

import hashlib
import http.server
import io
import math
import pickle
import tarfile
import threading
from pathlib import Path

import pytest
import torch
from tinydata import write_tiny_cifar

from torchdeck.trainer import data
from torchdeck.trainer.errors import TrainerError


@pytest.mark.parametrize("bytes_keys", [True, False], ids=["bytes-keys", "str-keys"])
def test_loader_reads_both_key_styles(tmp_path: Path, bytes_keys: bool) -> None:
    folder = write_tiny_cifar(tmp_path, per_batch=12, bytes_keys=bytes_keys)
    train = data.load_cifar10(tmp_path, train=True)
    test = data.load_cifar10(folder, train=False)  # the batches folder itself works too
    assert train.images.shape == (60, 3, 32, 32) and train.images.dtype == torch.uint8
    assert test.images.shape == (12, 3, 32, 32)
    assert train.labels.dtype == torch.int64
    assert train.labels[:12].tolist() == [i % 10 for i in range(12)]
    assert train.classes[0] == "airplane" and len(train.classes) == 10
    # Row-major R, G, B planes: the first 1024 values of a row are the red plane.
    with open(folder / "test_batch", "rb") as f:
        raw = pickle.load(f, encoding="bytes" if bytes_keys else "latin1")
    first = raw[b"data" if bytes_keys else "data"][0]
    assert torch.equal(test.images[0, 0].flatten(), torch.from_numpy(first[:1024].copy()))
    assert torch.equal(test.images[0, 2].flatten(), torch.from_numpy(first[2048:].copy()))


def test_loader_reads_the_real_subset(cifar_dir: Path) -> None:
    train = data.load_cifar10(cifar_dir, train=True)
    test = data.load_cifar10(cifar_dir, train=False)
    assert len(train) == 5085 and len(test) == 1017
    counts = torch.bincount(train.labels, minlength=10)
    assert counts.min() > 400 and counts.max() < 620  # balanced, as ../shared/data's README says


def test_loader_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(TrainerError, match="does not exist"):
        data.load_cifar10(tmp_path / "nope", train=True)
    with pytest.raises(TrainerError, match="no CIFAR-10 batches"):
        data.load_cifar10(tmp_path, train=True)
    folder = write_tiny_cifar(tmp_path / "bad", per_batch=4)
    (folder / "test_batch").write_bytes(b"this is not a pickle")
    with pytest.raises(TrainerError, match="cannot read CIFAR-10 batch") as info:
        data.load_cifar10(folder, train=False)
    assert "\n" not in str(info.value)
    with open(folder / "data_batch_1", "wb") as f:
        pickle.dump({"data": [[1, 2, 3]], "labels": [0]}, f)
    with pytest.raises(TrainerError, match="expected \\(N, 3072\\)"):
        data.load_cifar10(folder, train=True)


class _RunsAShellCommand:
    """Pickles to a call of os.system, as a crafted batch on a shared volume would."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("name", ["test_batch", "batches.meta"])
def test_a_crafted_batch_runs_nothing(tmp_path: Path, name: str) -> None:
    """Issue 16 row 1: batches come from S3, shared volumes and existing folders,
    so the loader must never call what a pickle names (a plain pickle.load ran it)."""
    folder = write_tiny_cifar(tmp_path / "data", per_batch=4)
    marker = tmp_path / "ran"
    with open(folder / name, "wb") as f:
        pickle.dump(
            {b"data": _RunsAShellCommand(marker), b"labels": [0], b"label_names": [_RunsAShellCommand(marker)]},
            f,
            protocol=2,
        )
    if name == "test_batch":
        with pytest.raises(TrainerError, match="names posix.system, which a CIFAR-10 batch never does") as info:
            data.load_cifar10(folder, train=False)
        assert "\n" not in str(info.value)
    else:  # label names are a courtesy: the standard ones are used and nothing runs
        assert data.load_cifar10(folder, train=True).classes == data.CLASSES
    assert not marker.exists()


@pytest.mark.parametrize("n,world", [(100, 2), (101, 2), (103, 4), (7, 1)])
def test_shards_cover_the_data_once_per_epoch(n: int, world: int) -> None:
    samplers = [data.ShardedSampler(n, r, world, seed=3) for r in range(world)]
    orders = []
    for epoch in range(3):
        shards = []
        for s in samplers:
            s.set_epoch(epoch)
            shards.append(s.indices())
        assert len({len(x) for x in shards}) == 1  # every rank takes the same number of steps
        joined = torch.cat(shards)
        assert set(joined.tolist()) == set(range(n))  # every image, every epoch
        assert len(joined) - n < world  # only padding repeats, fewer than one per rank
        orders.append(joined.tolist())
    assert orders[0] != orders[1] != orders[2]  # reshuffled between epochs


@pytest.mark.parametrize("before,after,done", [(2, 1, 3), (1, 2, 6), (4, 2, 2), (1, 2, 5)])
def test_a_snapshot_taken_at_another_world_size_resumes_at_the_samples_its_epoch_had_taken(before, after, done):
    """An elastic run's snapshot of epoch 1, ``done`` batches into it with ``before`` ranks, resumed
    with ``after``: the new ranks take none of the samples the old ones had (where the batches
    divide them; else at most one batch a rank again), and the epoch's samples are all taken."""
    from types import SimpleNamespace

    from torchdeck.trainer.train import Trainer

    n, bs = 96, 4

    def shards(world: int) -> list[list[int]]:
        samplers = [data.ShardedSampler(n, r, world, seed=1) for r in range(world)]
        for s in samplers:
            s.set_epoch(1)
        return [s.indices().tolist() for s in samplers]

    spe = {w: math.ceil(math.ceil(n / w) / bs) for w in (before, after)}
    state = {"epoch": 1, "step": spe[before] + done, "steps_per_epoch": spe[before], "world_size": before}
    here = SimpleNamespace(steps_per_epoch=spe[after], env=SimpleNamespace(world_size=after))
    step = Trainer.step_in_this_world(here, state)  # type: ignore[arg-type]  # what the method reads of a trainer
    assert spe[after] <= step < 2 * spe[after]  # in the same epoch
    taken = {i for shard in shards(before) for i in shard[: done * bs]}
    rest = [i for shard in shards(after) for i in shard[(step - spe[after]) * bs :]]
    assert taken | set(rest) == set(range(n))
    # taken again: the batches that do not fill a batch of every new rank (none where they divide)
    assert len(taken & set(rest)) == (done * before) % after * bs < after * bs
    unsaid = {**state, "world_size": None}  # a snapshot that does not say its world size: its epoch again
    assert Trainer.step_in_this_world(here, unsaid) == spe[after]  # type: ignore[arg-type]


def test_sampler_is_deterministic_for_an_epoch() -> None:
    a, b = data.ShardedSampler(50, 1, 2, seed=9), data.ShardedSampler(50, 1, 2, seed=9)
    a.set_epoch(4)
    b.set_epoch(4)
    assert a.indices().tolist() == b.indices().tolist()
    assert list(a) == a.indices().tolist() and len(a) == 25


def test_random_translate_crops_from_the_padded_image() -> None:
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    assert torch.equal(data.random_translate(x, 0, torch.Generator()), x)
    out = data.random_translate(x, 2, torch.Generator().manual_seed(1))
    assert out.shape == x.shape
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2), mode="reflect")
    for i in range(2):
        windows = [padded[i, :, dy : dy + 8, dx : dx + 8] for dy in range(5) for dx in range(5)]
        assert any(torch.equal(out[i], w) for w in windows)


def test_flips_alternate_per_image_across_epochs() -> None:
    images = torch.arange(4 * 3 * 32 * 32, dtype=torch.float32).reshape(4, 3, 32, 32).to(torch.uint8)
    ds = data.ImageSet(images, torch.arange(4))
    pipe = data.BatchPipeline(ds, augment=True, crop_pad=0, mean=(0, 0, 0), std=(1, 1, 1))
    idx = torch.arange(4)
    e0, _ = pipe.batch(idx, epoch=0, step=0)
    e1, _ = pipe.batch(idx, epoch=1, step=0)
    plain = images.float()
    for i in range(4):
        flipped0 = torch.equal(e0[i], plain[i].flip(2))
        flipped1 = torch.equal(e1[i], plain[i].flip(2))
        assert flipped0 != flipped1
        assert flipped0 or torch.equal(e0[i], plain[i])


def test_batch_normalises_on_the_whole_batch_and_keeps_uint8_storage() -> None:
    ds = data.synthetic_cifar10(16)
    assert ds.images.dtype == torch.uint8
    pipe = data.BatchPipeline(ds, augment=False, channels_last=True)
    x, y = pipe.batch(torch.arange(16), 0, 0)
    assert x.dtype == torch.float32 and x.is_contiguous(memory_format=torch.channels_last)
    expected = (ds.images.float() - torch.tensor(data.MEAN).view(1, 3, 1, 1)) / torch.tensor(data.STD).view(1, 3, 1, 1)
    assert torch.allclose(x, expected, atol=1e-5)
    assert torch.equal(y, ds.labels)


class _ArchiveHandler(http.server.BaseHTTPRequestHandler):
    payload = b""
    requests = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).requests += 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        self.wfile.write(self.payload)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def archive_server(tmp_path: Path):
    """A local HTTP server serving a tiny CIFAR-10 archive (no internet)."""
    src = tmp_path / "src"
    write_tiny_cifar(src, per_batch=5)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    _ArchiveHandler.payload = buf.getvalue()
    _ArchiveHandler.requests = 0
    server = http.server.HTTPServer(("127.0.0.1", 0), _ArchiveHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/cifar.tar.gz", hashlib.md5(_ArchiveHandler.payload).hexdigest()
    server.shutdown()


def test_download_verifies_and_unpacks_atomically(tmp_path: Path, archive_server) -> None:
    url, md5 = archive_server
    target = data.download_cifar10(tmp_path / "data", url=url, md5=md5)
    assert len(data.load_cifar10(tmp_path / "data", train=True)) == 25
    assert target.name == "cifar-10-batches-py"
    assert not [p for p in (tmp_path / "data").iterdir() if p.name.startswith(".download-")]


def test_ranks_downloading_at_once_fetch_once(tmp_path: Path, archive_server) -> None:
    url, md5 = archive_server
    results: list[object] = []

    def rank() -> None:
        try:
            results.append(data.download_cifar10(tmp_path / "data", url=url, md5=md5))
        except Exception as exc:  # collected and asserted below
            results.append(exc)

    threads = [threading.Thread(target=rank) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(isinstance(r, Path) for r in results) and len(results) == 4, results
    assert _ArchiveHandler.requests == 1
    assert len(data.load_cifar10(tmp_path / "data", train=False)) == 5


def test_download_with_a_bad_checksum_leaves_nothing(tmp_path: Path, archive_server) -> None:
    url, _ = archive_server
    with pytest.raises(TrainerError, match="expected 0+"):
        data.download_cifar10(tmp_path / "data", url=url, md5="0" * 32)
    assert [p.name for p in (tmp_path / "data").iterdir()] == [".download.lock"]  # no data, no temporaries


def test_download_without_network_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(TrainerError) as info:
        data.download_cifar10(tmp_path / "data", url="http://127.0.0.1:9/cifar.tar.gz", timeout=5)
    assert "cannot download CIFAR-10" in str(info.value) and "no network" in str(info.value)
    assert "\n" not in str(info.value)
