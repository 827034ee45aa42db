"""The layering of ../shared/docs/STYLE.md, checked: backends/ and trainer/
import no Textual, tui/ imports no boto3, kubernetes or torch, the trainer
needs only torch and numpy at import time, and `torchdeck --help` loads
none of the heavy libraries."""

from __future__ import annotations

import ast
import subprocess
import sys

from trainer_runs import REPO

STDLIB = set(sys.stdlib_module_names)


def imports(folder: str, top_level_only: bool = False) -> dict[str, set[str]]:
    """Top package of every import in the folder's modules, by file."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        nodes = tree.body if top_level_only else list(ast.walk(tree))
        names: set[str] = set()
        for node in nodes:
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(REPO))] = names
    return found


def test_backends_and_trainer_import_no_textual() -> None:
    for folder in ("backends", "trainer"):
        for path, names in imports(folder).items():
            assert not names & {"textual", "textual_plotext", "plotext", "rich"}, path


def test_tui_imports_no_cloud_or_torch() -> None:
    for path, names in imports("tui").items():
        assert not names & {"boto3", "botocore", "kubernetes", "torch", "numpy"}, path


def test_trainer_needs_only_torch_and_numpy_at_import() -> None:
    for path, names in imports("trainer", top_level_only=True).items():
        assert names - STDLIB - {"torch", "numpy", "__future__"} == set(), path
    # Optional ones (boto3, torchvision, pynvml) are imported inside the functions that use them.
    optional = set().union(*imports("trainer").values()) - STDLIB - {"torch", "numpy", "__future__"}
    assert optional <= {"boto3", "torchvision", "pynvml"}


def test_cli_help_loads_no_heavy_library() -> None:
    code = ("import sys, contextlib, io\n"
            "from torchdeck.cli import main as cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: cli.main(['--help'])\n"
            "    except SystemExit: pass\n"
            "heavy = {'torch', 'boto3', 'kubernetes', 'textual'} & set(sys.modules)\n"
            "print(sorted(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"


def test_backends_import_no_cloud_sdk_at_top_level() -> None:
    """kubernetes and boto3 are imported by the backends that use them, when
    they are opened; the local backend needs neither."""
    for path, names in imports("backends", top_level_only=True).items():
        assert not names & {"boto3", "botocore", "kubernetes", "torch"}, path


def test_console_first_frame_loads_no_torch_boto3_or_kubernetes(tmp_path) -> None:
    code = ("import asyncio, sys\n"
            "from torchdeck.settings import Settings\n"
            "from torchdeck.backends import open_backend\n"
            "from torchdeck.tui.app import make_app\n"
            f"s = Settings(state_dir={str(tmp_path)!r})\n"
            "app = make_app(s, open_backend('local', s))\n"
            "async def main():\n"
            "    async with app.run_test(size=(80, 24)) as pilot:\n"
            "        await pilot.pause(0.2)\n"
            "asyncio.run(main())\n"
            "print(sorted({'torch', 'boto3', 'kubernetes', 'numpy'} & set(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip().splitlines()[-1] == "[]"
