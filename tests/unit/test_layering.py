"""The layering of ../shared/docs/STYLE.md, checked: backends/, monitor/
and trainer/ import no Textual, and backends/ nothing of the front ends;
cli/ imports Textual only to open the console; tui/ imports no boto3,
kubernetes or torch, and reaches AWS and Kubernetes only through the
backends' front objects; no module imports another's private names (nor a
library's private modules); the trainer needs only torch and numpy at import
time, and `torchdeck --help` loads none of the heavy libraries."""

from __future__ import annotations

import ast
import subprocess
import sys

from trainer_runs import REPO

STDLIB = set(sys.stdlib_module_names)


FOLDERS = ("backends", "cli", "monitor", "trainer", "tui")


def module_of(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(["torchdeck", *(parts[:-1] if parts[-1] == "__init__" else parts)])


def imported(folder: str, top_level_only: bool = False) -> dict[str, list[tuple[str, list[str]]]]:
    """Every import in the folder's modules as (absolute module, names taken from it), by file."""
    found: dict[str, list[tuple[str, list[str]]]] = {}
    for path in sorted((REPO / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        package = module_of(path).split(".")
        if path.name != "__init__.py":
            package = package[:-1]
        nodes = tree.body if top_level_only else list(ast.walk(tree))
        out: list[tuple[str, list[str]]] = []
        for node in nodes:
            if isinstance(node, ast.Import):
                out += [(a.name, []) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                out.append((module, [a.name for a in node.names]))
        found[str(path.relative_to(REPO))] = out
    return found


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
    # and the relay's own modules, which it imports by their file names when it runs from a code
    # bundle (trainer/relay.py: its modules lie beside it there)
    assert optional <= {
        "boto3",
        "torchvision",
        "pynvml",
        "kubeflow_status",
        "logfiles",
        "regular_files",
        "rewrites",
        "textmetrics",
        "tracebacks",
        "re2",
    }


def test_cli_help_loads_no_heavy_library() -> None:
    code = (
        "import sys, contextlib, io\n"
        "from torchdeck.cli import main as cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: cli.main(['--help'])\n"
        "    except SystemExit: pass\n"
        "heavy = {'torch', 'boto3', 'kubernetes', 'textual'} & set(sys.modules)\n"
        "print(sorted(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"


def test_backends_import_no_cloud_sdk_at_top_level() -> None:
    """kubernetes and boto3 are imported by the backends that use them, when
    they are opened; the local backend needs neither."""
    for path, names in imports("backends", top_level_only=True).items():
        assert not names & {"boto3", "botocore", "kubernetes", "torch"}, path


def test_console_first_frame_loads_no_torch_boto3_or_kubernetes(tmp_path) -> None:
    code = (
        "import asyncio, sys\n"
        "from torchdeck.settings import Settings\n"
        "from torchdeck.backends import open_backend\n"
        "from torchdeck.tui.app import make_app\n"
        f"s = Settings(state_dir={str(tmp_path)!r})\n"
        "app = make_app(s, open_backend('local', s))\n"
        "async def main():\n"
        "    async with app.run_test(size=(80, 24)) as pilot:\n"
        "        await pilot.pause(0.2)\n"
        "asyncio.run(main())\n"
        "print(sorted({'torch', 'boto3', 'kubernetes', 'numpy'} & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_backends_import_no_front_end():
    for path, found in imported("backends").items():
        assert not [m for m, _ in found if m.startswith(("torchdeck.tui", "torchdeck.cli", "torchdeck.monitor"))], path


def test_monitor_imports_no_textual():
    for path, names in imports("monitor").items():
        assert not names & {"textual", "textual_plotext", "plotext"}, path


def test_cli_opens_the_console_and_draws_nothing_else():
    """cli/ never imports Textual itself; only the console command opens the app (inside its branch)."""
    for path, names in imports("cli").items():
        assert not names & {"textual", "textual_plotext", "plotext", "boto3", "botocore", "kubernetes"}, path
    for path, found in imported("cli", top_level_only=True).items():
        assert not [m for m, _ in found if m.startswith("torchdeck.tui")], path
    opening = {path for path, found in imported("cli").items() if any(m.startswith("torchdeck.tui") for m, _ in found)}
    assert opening == {"cli/console.py"}


def test_front_ends_reach_aws_and_kubernetes_through_the_front_objects():
    """Screens and commands hold an EksCloud or a Backend, never a session or a Kubernetes client."""
    clients = (
        "torchdeck.backends.eks.session",
        "torchdeck.backends.kubernetes.client",
        "torchdeck.backends.kubernetes.backend",
        "torchdeck.backends.eks.teardown.Teardown",
    )
    for folder in ("cli", "tui"):
        for path, found in imported(folder).items():
            bad = [m for m, names in found if m.startswith(clients[:3]) or any(f"{m}.{n}" in clients for n in names)]
            assert not bad, (path, bad)


def test_no_module_imports_another_modules_private_names():
    for folder in FOLDERS:
        for path, found in imported(folder).items():
            private = [(m, n) for m, names in found for n in names if n.startswith("_") and n != "__version__"]
            assert not private, (path, private)
            assert not [
                m for m, _ in found if any(part.startswith("_") and part != "__future__" for part in m.split("."))
            ], path


def test_no_import_cycle_outside_the_apps_screens() -> None:
    """Issue 30: no product module reaches itself through imports made as modules load (imports
    inside functions and TYPE_CHECKING blocks load nothing then); the Textual app and its screens
    may know each other (the app opens the screens, a screen asks the app)."""
    graph: dict[str, set[str]] = {}
    for folder in FOLDERS:
        for file, found in imported(folder, top_level_only=True).items():
            graph[module_of(REPO / file)] = {m for m, _ in found if m.startswith("torchdeck.")}
    for name in ("settings", "report", "terminal"):
        graph[f"torchdeck.{name}"] = {m for m, _ in imported_file(REPO / f"{name}.py") if m.startswith("torchdeck.")}

    def allowed(cycle: list[str]) -> bool:
        return all(m.startswith(("torchdeck.tui.app", "torchdeck.tui.screens", "torchdeck.tui")) for m in cycle)

    kept = [c for c in find_cycles(graph) if not allowed(c)]
    assert kept == [], kept[:3]


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import path that comes back to where it started (up to 8 modules long)."""
    cycles = []
    for start in graph:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                nxt = nxt if nxt in graph else nxt.rsplit(".", 1)[0]  # `from pkg import name`
                if nxt == start and len(path) > 1:
                    cycles.append(path)
                elif nxt not in path and len(path) < 8:
                    stack.append((nxt, [*path, nxt]))
    return cycles


def test_backends_have_no_import_cycle_even_through_imports_inside_functions() -> None:
    """Issue 43: an import inside a function (or under TYPE_CHECKING) that closes a cycle hides a
    helper that reaches back into what calls it (preflight, streams and tasks took the whole
    KubernetesBackend); backends/ has none, and the kubernetes backend imports nothing of AWS."""
    modules = {module_of(path) for path in (REPO / "backends").rglob("*.py")}
    graph = {
        module_of(REPO / file): {
            target
            for m, names in found
            if m.startswith("torchdeck.backends")
            for target in ([f"{m}.{n}" for n in names if f"{m}.{n}" in modules] or [m])  # `from .. import bundle`
        }
        for file, found in imported("backends").items()
    }
    assert find_cycles(graph) == [], find_cycles(graph)[:3]
    aws = {
        file: sorted(
            m for m, _ in found if m.startswith("torchdeck.backends.eks") or m.split(".")[0] in ("boto3", "botocore")
        )
        for file, found in imported("backends/kubernetes").items()
    }
    assert {f: m for f, m in aws.items() if m} == {}


def imported_file(path) -> list[tuple[str, list[str]]]:
    """The top-level imports of one root module (settings, report, terminal), as ``imported`` gives them."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[str, list[str]]] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = ".".join((["torchdeck"] if node.level else []) + ([node.module] if node.module else []))
            out.append((module, [a.name for a in node.names]))
    return out
