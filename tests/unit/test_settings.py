"""Settings: config file, then environment; bad values named."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchdeck.settings import Settings, SettingsError


def test_environment_wins_over_the_file(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("refresh_hz: 5\nstate_dir: /tmp/from-file\n")
    s = Settings.load(env={"TORCHDECK_STATE_DIR": str(tmp_path / "st"), "TORCHDECK_ASCII": "1"}, config_file=config)
    assert s.state_dir == tmp_path / "st" and s.refresh_hz == 5.0 and s.ascii is True


def test_state_dir_follows_xdg(tmp_path):
    s = Settings.load(env={"XDG_STATE_HOME": str(tmp_path)}, config_file=tmp_path / "none.yaml")
    assert s.state_dir == tmp_path / "torchdeck"
    s = Settings.load(env={}, config_file=tmp_path / "none.yaml")
    assert s.state_dir == Path.home() / ".local/state/torchdeck"


@pytest.mark.parametrize(
    "var, value, words",
    [
        ("TORCHDECK_REFRESH_HZ", "fast", "refresh_hz must be a number from 1 to 60"),
        ("TORCHDECK_BACKEND", "slurm", "backend must be local, kubernetes or eks"),
        ("TORCHDECK_ASCII", "maybe", "ascii must be 1 or 0"),
    ],
)
def test_bad_setting_names_itself_and_its_source(tmp_path, var, value, words):
    with pytest.raises(SettingsError) as info:
        Settings.load(env={var: value}, config_file=tmp_path / "none.yaml")
    assert str(info.value).startswith(f"{var}: ") and words in str(info.value)


def test_global_options_go_before_or_after_the_command(tmp_path, monkeypatch, capsys):
    from torchdeck.cli.main import build_parser, main

    parser = build_parser()
    for argv, backend, context in (
        (["train", "--backend", "kubernetes"], "kubernetes", None),
        (["--backend", "eks", "train"], "eks", None),
        (["--context", "a", "jobs", "--context", "b"], None, "b"),
        (["cluster", "status", "--context", "x"], None, "x"),
        (["train"], None, None),
    ):
        args = parser.parse_args(argv)
        assert (args.backend, args.context) == (backend, context), argv
    assert parser.parse_args(["jobs", "--ascii"]).ascii is True
    monkeypatch.setenv("TORCHDECK_STATE_DIR", str(tmp_path))
    assert main(["jobs", "--backend", "nope"]) != 0  # the option after the command reaches the settings
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "backend must be local, kubernetes or eks, got 'nope'" in err


def test_model_get_passes_through_the_bucket_beside_the_runs_own_claim(tmp_path):
    """Two clusters with buckets: the run's spec names the claim of the second, so its bucket is
    used, not the alphabetically first one's."""
    from torchdeck.backends.eks.access import ClusterRecord, StorageChoice
    from torchdeck.backends.eks.cloud import EksCloud
    from torchdeck.backends.errors import BackendError
    from torchdeck.backends.spec import spec_from_dict

    for name, pvc in (("alpha", "shared"), ("beta", "beta-shared")):
        record = ClusterRecord.open(tmp_path, name, "us-west-2")
        record.storage = StorageChoice("efs", pvc, "default", f"{name}-models", "runs/", "torchdeck-s3")
        record.save()
    cloud = EksCloud(tmp_path)
    spec = spec_from_dict({"name": "x", "cluster": {"pvc": "beta-shared", "service_account": "torchdeck-s3"}})
    assert cloud.model_prefix(spec) == "s3://beta-models/runs/models"
    with pytest.raises(BackendError, match="no bucket torchdeck made sits beside that claim"):
        cloud.model_prefix(spec_from_dict({"name": "x", "cluster": {"pvc": "elsewhere"}}))


def test_a_binary_config_file_and_a_list_for_a_number_are_one_line(tmp_path):
    """Issue 16 row 13: these were a UnicodeDecodeError and a TypeError traceback."""
    config = tmp_path / "config.yaml"
    config.write_bytes(b"\xff\xfe\x00binary\x80")
    with pytest.raises(SettingsError, match="config.yaml: is not text"):
        Settings.load(env={}, config_file=config)
    config.write_text("refresh_hz: [1]\n")
    with pytest.raises(SettingsError, match=r"refresh_hz must be a number from 1 to 60, got \[1\]"):
        Settings.load(env={}, config_file=config)
