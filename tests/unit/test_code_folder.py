"""Issue 31: the code folder is the project: where a script's project starts, which of its imports
the folder, its requirements and the standard library hold, and the outputs a bundle should not
carry."""

from __future__ import annotations

from pathlib import Path

from torchdeck.backends import bundle


def test_the_project_is_the_nearest_folder_with_a_marker_and_none_above_home(tmp_path: Path) -> None:
    deep = tmp_path / "repo" / "projects" / "chargpt"
    deep.mkdir(parents=True)
    assert bundle.project_root(deep, stop=tmp_path) is None
    (tmp_path / "repo" / ".git").mkdir()
    assert bundle.project_root(deep, stop=tmp_path) == tmp_path / "repo"
    (tmp_path / "repo" / "projects" / "pyproject.toml").write_text("")
    assert bundle.project_root(deep, stop=tmp_path) == tmp_path / "repo" / "projects"


def test_only_the_imports_at_the_top_that_nothing_provides_are_named(tmp_path: Path) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "helper.py").write_text("")
    (tmp_path / "requirements.txt").write_text(
        "# pinned\nscikit-learn==1.5\nPyYAML>=6 ; python_version > '3'\n-r other.txt\n"
    )
    (tmp_path / "sub" / "train.py").write_text(
        "import os, json\nimport torch.nn as nn\nimport numpy as np\nimport mypkg.model\nimport helper\n"
        "from sklearn import svm\nimport yaml\nfrom . import sibling\n"
        "try:\n    import wandb\nexcept ImportError:\n    wandb = None\n"
        "def f():\n    import tensorflow\n"
        "if __name__ == '__main__':\n    import lightning\n"
    )
    assert bundle.script_imports(tmp_path / "sub" / "train.py") == [
        "os", "json", "torch", "numpy", "mypkg", "helper", "sklearn", "yaml", "lightning",
    ]  # fmt: skip
    assert bundle.unresolved_imports(tmp_path, "sub/train.py", "requirements.txt") == ["numpy", "lightning"]
    (tmp_path / "broken.py").write_text("import (\n")
    assert bundle.script_imports(tmp_path / "broken.py") == []  # the script's own error, when it runs


def test_a_bundle_names_the_large_outputs_it_holds_with_the_lines_that_leave_them_out(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('loss 1')\n")
    (tmp_path / "model.pt").write_bytes(b"\0" * (3 << 20))
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "last.ckpt").write_bytes(b"\0" * (2 << 20))
    (tmp_path / "tiny.pt").write_bytes(b"\0" * 100)  # small: a fixture, not an output
    warning = bundle.pack(tmp_path).outputs_warning()
    assert warning == (
        "the code bundle holds model.pt (3.0 MiB), ckpt/last.ckpt (2.0 MiB): outputs of an earlier run? "
        "lines **/*.ckpt **/*.pt in .dockerignore leave them out"
    )
    (tmp_path / ".dockerignore").write_text("**/*.pt\n**/*.ckpt\n")
    assert bundle.pack(tmp_path).outputs_warning() is None
