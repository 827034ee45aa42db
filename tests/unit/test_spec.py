"""Job specs: YAML in and out, validation that names the bad field, overrides."""

from __future__ import annotations

import pytest
import yaml

from torchdeck.backends.errors import SpecError
from torchdeck.backends.spec import (
    JobSpec,
    load_spec,
    parse_override,
    save_spec,
    spec_from_dict,
    with_overrides,
)


def test_defaults_round_trip_through_yaml(tmp_path):
    path = tmp_path / "torchdeck.yaml"
    spec = JobSpec(name="demo", nproc_per_node=4, env={"NCCL_DEBUG": "INFO"})
    spec.trainer.epochs = 7
    save_spec(spec, path)
    loaded = load_spec(path)
    assert loaded.name == "demo" and loaded.nproc_per_node == 4 and loaded.trainer.epochs == 7
    assert loaded.env == {"NCCL_DEBUG": "INFO"}
    # relative paths are taken from the spec file's folder
    assert loaded.data_dir == str(tmp_path / "data")


@pytest.mark.parametrize(
    "text, field, words",
    [
        ("nproc_per_node: two\n", "nproc_per_node", "must be an integer >= 1, got 'two'"),
        ("trainer:\n  epochs: 0\n", "trainer.epochs", "must be an integer >= 1, got 0"),
        ("trainer:\n  epoch: 3\n", "trainer.epoch", "unknown field"),
        ("nprocs: 2\n", "nprocs", "unknown field"),
        ("name: My_Job\n", "name", "lower-case"),
        ("device: tpu\n", "device", "must be one of auto, cpu, cuda"),
        ("resources:\n  memory: lots\n", "resources.memory", "Kubernetes quantity"),
        ("trainer:\n  recipe: slow\n", "trainer.recipe", "must be one of fast, seed"),
        ("download: maybe\n", "download", "must be true or false"),
        ("env:\n  OMP_NUM_THREADS: 4\n", "env", "quote numbers"),
    ],
)
def test_bad_field_is_named(tmp_path, text, field, words):
    path = tmp_path / "torchdeck.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.field == field
    assert str(info.value).startswith(f"{path}: {field}: ")
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_typo_gets_a_did_you_mean_hint(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("trainer:\n  batchsize: 64\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.hint == "did you mean trainer.batch_size?"


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: a\ntrainer:\n  epochs: [1\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "line" in str(info.value) and str(path) in str(info.value)


def test_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "nope.yaml")
    assert "no such file" in str(info.value) and "torchdeck init" in info.value.hint


def test_overrides_are_typed_and_validated():
    spec = with_overrides(JobSpec(), {"trainer.epochs": 3, "nproc_per_node": 4})
    assert spec.trainer.epochs == 3 and spec.nproc_per_node == 4
    assert parse_override("trainer.seed=3") == ("trainer.seed", 3)
    assert parse_override("download=true") == ("download", True)
    with pytest.raises(SpecError) as info:
        with_overrides(JobSpec(), {"trainer.epochs": -1})
    assert info.value.field == "trainer.epochs"
    with pytest.raises(SpecError):
        parse_override("trainer.seed")


def test_spec_choices_match_the_trainer():
    """The spec validates recipes and models without importing the trainer
    (torch); they must stay the trainer's own names."""
    from torchdeck.trainer.models import MODELS as TRAINER_MODELS
    from torchdeck.trainer.options import MODEL_NAMES as MODELS
    from torchdeck.trainer.options import RECIPE_NAMES as RECIPES
    from torchdeck.trainer.recipes import RECIPES as TRAINER_RECIPES

    assert set(RECIPES) == set(TRAINER_RECIPES)
    assert set(MODELS) == set(TRAINER_MODELS)


def test_yaml_aliases_are_refused_and_long_values_are_cut_in_messages(tmp_path):
    """Issue 16 row 3: 400 bytes of aliases expanded to 673 MB in render; a 39 MB value was echoed whole."""
    bomb = tmp_path / "bomb.yaml"
    lines = ['a0: &a0 ["xxxxxxxx", "xxxxxxxx", "xxxxxxxx", "xxxxxxxx", "xxxxxxxx", "xxxxxxxx"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 6)}]" for i in range(1, 9)]
    bomb.write_text("\n".join(lines) + "\nname: demo\n")
    with pytest.raises(SpecError, match=r"line 2: YAML aliases \(\*name\) are not taken here"):
        load_spec(bomb)
    big = tmp_path / "big.yaml"
    big.write_text("name: " + "x" * 2_000_000 + "\n")
    with pytest.raises(SpecError) as caught:
        load_spec(big)
    assert "at most 1,048,576 are read" in str(caught.value) and len(str(caught.value)) < 400
    long_value = tmp_path / "long.yaml"
    long_value.write_text("device: " + "y" * 200_000 + "\n")
    with pytest.raises(SpecError) as caught:
        load_spec(long_value)
    assert "more characters" in str(caught.value) and len(str(caught.value)) < 1000


def test_a_binary_spec_and_manifest_are_one_line(tmp_path, capsys):
    from torchdeck.cli.main import main

    binary = tmp_path / "torchdeck.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with pytest.raises(SpecError, match="is not text"):
        load_spec(binary)
    assert main(["import", str(binary), "-o", str(tmp_path / "out.yaml")]) == 2
    assert main(["render", str(binary), "--image", "r/t:1"]) == 2
    assert main(["cluster", "plan", "--file", str(binary)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 3 and "Traceback" not in err and err.count("is not text") == 3


def test_a_file_in_a_missing_folder_is_one_line(tmp_path, capsys, monkeypatch):
    """Issue 16 row 13: `cluster init --file` and `model get -o` into a folder that does not exist."""
    from torchdeck.cli.main import main

    monkeypatch.setenv("TORCHDECK_STATE_DIR", str(tmp_path / "state"))
    missing = tmp_path / "missing" / "dir"
    argv = ["cluster", "init", "--name", "demo", "--region", "us-west-2", "--file", str(missing / "c.yaml")]
    assert main(argv) == 1
    model = tmp_path / "model.pt"
    model.write_bytes(b"weights")
    assert main(["model", "get", "--from", str(model), "-o", str(missing / "m.pt")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 2
    assert f"{missing}/c.yaml: No such file or directory" in err and f"{missing}/m.pt: No such file" in err


def test_the_one_spec_updater_keeps_what_it_does_not_change(tmp_path):
    """Issue 30: image build and storage create each edited the spec their own way; storage's
    copy wrote the spec back with its relative paths made absolute."""
    from torchdeck.backends.spec import update_spec_file

    path = tmp_path / "torchdeck.yaml"
    path.write_text("name: mine\nentrypoint:\n  script: train.py\n  code: src\ndata_dir: data\ntrainer:\n  epochs: 7\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print(1)\n")
    update_spec_file(path, {"cluster.pvc": "shared", "image": "r/t:1"})
    written = yaml.safe_load(path.read_text())
    assert written["entrypoint"]["code"] == "src" and written["data_dir"] == "data"
    assert written["trainer"]["epochs"] == 7 and written["cluster"]["pvc"] == "shared" and written["image"] == "r/t:1"
    fresh = update_spec_file(tmp_path / "new.yaml", {"image": "r/t:2"})
    assert fresh.image == "r/t:2" and load_spec(tmp_path / "new.yaml").image == "r/t:2"


def test_metric_tags_name_known_roles_only():
    spec = spec_from_dict({"metrics": {"tags": {"loss": "train/objective", "val_loss": "holdout/objective"}}})
    assert spec.metrics.tags == {"loss": "train/objective", "val_loss": "holdout/objective"}
    for tags, words in (
        ({"lossy": "x"}, "'lossy' is not one of loss"),
        ({"loss": ""}, "1-200 printable"),
        ("x", "mapping"),
    ):
        with pytest.raises(SpecError, match="metrics.tags") as caught:
            spec_from_dict({"metrics": {"tags": tags}})
        assert words in str(caught.value)
