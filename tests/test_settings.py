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


@pytest.mark.parametrize("var, value, words", [
    ("TORCHDECK_REFRESH_HZ", "fast", "refresh_hz must be a number from 1 to 60"),
    ("TORCHDECK_BACKEND", "slurm", "backend must be local, kubernetes or eks"),
    ("TORCHDECK_ASCII", "maybe", "ascii must be 1 or 0"),
])
def test_bad_setting_names_itself_and_its_source(tmp_path, var, value, words):
    with pytest.raises(SettingsError) as info:
        Settings.load(env={var: value}, config_file=tmp_path / "none.yaml")
    assert str(info.value).startswith(f"{var}: ") and words in str(info.value)
