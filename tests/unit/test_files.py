"""Issue 16 row 9: temporary files are made exclusively beside their target, never
at a fixed name a planted symlink could redirect, and a symlinked kubeconfig is
written through (the link stays, the file it names gets the change)."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
import yaml

from torchdeck.backends.eks.access import ClusterRecord, context_name, write_context
from torchdeck.backends.files import replace_text, write_atomically
from torchdeck.backends.run_records import write_json

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def plant(folder: Path, names: list[str], victim: Path) -> None:
    """Symlinks at every temporary name the old code used, pointing at someone else's file."""
    for name in names:
        (folder / name).symlink_to(victim)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_text("mine\n")
    path.chmod(0o644)
    return path


def untouched(victim: Path) -> bool:
    return victim.read_text() == "mine\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_a_planted_symlink_at_the_kubeconfig_temporary_name_is_not_followed(tmp_path: Path, victim: Path) -> None:
    kube = tmp_path / "kube"
    kube.mkdir()
    plant(kube, ["config.torchdeck.tmp", "config.tmp", ".config.tmp"], victim)
    write_context(kube / "config", "demo", "us-west-2", "https://example.invalid", CA)
    assert untouched(victim)
    assert stat.S_IMODE((kube / "config").stat().st_mode) == 0o600
    assert yaml.safe_load((kube / "config").read_text())["current-context"]
    assert sorted(p.name for p in kube.iterdir()) == sorted(
        ["config", "config.torchdeck.tmp", "config.tmp", ".config.tmp"]
    )


def test_a_symlinked_kubeconfig_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "kubeconfig"
    real.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "contexts": [{"name": "other", "context": {}}]})
    )
    link = tmp_path / "kube" / "config"
    link.parent.mkdir()
    link.symlink_to(real)
    write_context(link, "demo", "us-west-2", "https://example.invalid", CA)
    assert link.is_symlink() and link.resolve() == real
    config = yaml.safe_load(real.read_text())
    assert [c["name"] for c in config["contexts"]] == ["other", context_name("demo")]
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert [p.name for p in dotfiles.iterdir()] == ["kubeconfig"]  # no temporary left beside it


def test_specs_records_and_run_files_ignore_planted_temporaries(tmp_path: Path, victim: Path) -> None:
    plant(tmp_path, ["torchdeck.yaml.tmp", "status.json.tmp", f".status.json.{os.getpid()}.tmp"], victim)
    spec = tmp_path / "torchdeck.yaml"
    spec.write_text("old\n")
    spec.chmod(0o640)
    replace_text(spec, "name: demo\n")
    assert spec.read_text() == "name: demo\n" and stat.S_IMODE(spec.stat().st_mode) == 0o640  # its mode is kept
    write_json(tmp_path / "status.json", {"state": "running"})
    state = tmp_path / "state"
    (state / "clusters").mkdir(parents=True)
    plant(state / "clusters", ["demo.json.tmp"], victim)
    record = ClusterRecord.open(state, "demo", "us-west-2")
    record.save()
    assert untouched(victim)
    assert stat.S_IMODE((state / "clusters" / "demo.json").stat().st_mode) == 0o600


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "m.txt"
    target.write_text("old")
    with pytest.raises(OSError) as info:
        write_atomically(tmp_path / "gone" / "m.txt", "new")
    assert str(tmp_path / "gone" / "m.txt") in str(info.value)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["m.txt"]
