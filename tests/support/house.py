"""The house's shape, counted (issue 53): product functions that take or return ``Any``,
``(x.get(...) or {})`` chains outside the modules at the cluster's and the cloud's edge, functions
longer than 100 lines, and front ends that ask a backend what it is (``hasattr``/``getattr`` on it,
its name compared). ``scripts/house`` prints the counts; ``tests/unit/test_house.py`` holds them."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("backends", "cli", "monitor", "trainer", "tui")
TOP_MODULES = ("settings.py", "report.py", "terminal.py", "__main__.py", "__init__.py")
EDGE = (
    "backends/kubernetes/client.py",
    "backends/kubernetes/objects.py",
    "backends/kubernetes/kind_objects.py",
    "backends/eks/aws_objects.py",
    "backends/kubernetes/crds.py",
)
"""Where the cluster's and the cloud's answers (dicts) become typed objects: the only modules that
read them by key (crds.py: the operators' CRD documents, JSON Schema walked as the API server walks
it to check an object)."""
LONG = 100
TABLES: dict[str, str] = {}
"""Functions over LONG lines that are declarative tables (a parser's options as data), with why."""
FRONT_ENDS = ("cli", "tui", "monitor")
CHAIN = re.compile(
    r"\.get\([^()]*\) or \{\}\)|\.get\([^()]*,\s*\{\}\)\.get\(|or \{\}\)\.get\(|^\s*[\w, ]+ = [^=:]*\.get\([^()]*\) or \{\}\s*(#.*)?$"
    r"|as_map\(as_map\("
)
"""A dict read as a chain of defaults: ``(x.get(k) or {}).get(...)``, ``x.get(k, {}).get(...)``,
``(x or {}).get(...)``, an untyped default kept to be read on the next line (``y = x.get(k) or {}``;
a TypedDict's, ``y: Facts = x.get(k) or {}``, is typed), or ``as_map(as_map(...))``."""


@dataclass
class House:
    functions: int = 0
    with_any: list[str] = field(default_factory=list)
    chains: list[str] = field(default_factory=list)
    long: list[tuple[str, int]] = field(default_factory=list)
    probes: list[str] = field(default_factory=list)


def product_files() -> list[Path]:
    files = [p for folder in FOLDERS for p in sorted((REPO / folder).rglob("*.py"))]
    return files + [REPO / name for name in TOP_MODULES]


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    args = node.args
    parts = [a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs]
    parts += [args.vararg.annotation if args.vararg else None, args.kwarg.annotation if args.kwarg else None]
    return " ".join(ast.unparse(p) for p in [*parts, node.returns] if p is not None)


def _asks_what_a_backend_is(node: ast.AST) -> bool:
    """A front end's question of which backend it has: its name compared or handed to a decision
    (shown in a message is fine), a backend's class asked with isinstance, or a backend opened by
    its name."""
    if isinstance(node, ast.Compare):
        text = ast.unparse(node)
        return "backend_name" in text or "backend.name" in text
    if not isinstance(node, ast.Call):
        return False
    func = ast.unparse(node.func)
    if func == "isinstance" and len(node.args) == 2 and ast.unparse(node.args[1]).endswith("Backend"):
        return True
    if func.endswith("open_backend") and node.args and isinstance(node.args[0], ast.Constant):
        return True
    named = ("backend_name", "backend.name")
    return any(isinstance(arg, ast.Attribute) and ast.unparse(arg).endswith(named) for arg in node.args)


def count() -> House:
    house = House()
    for path in product_files():
        name = str(path.relative_to(REPO))
        source = path.read_text()
        for node in ast.walk(ast.parse(source, filename=name)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                house.functions += 1
                where = f"{name}:{node.lineno}:{node.name}"
                if re.search(r"\bAny\b", _signature(node)):
                    house.with_any.append(where)
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONG and f"{name}:{node.name}" not in TABLES:
                    house.long.append((where, lines))
            if name.split("/")[0] in FRONT_ENDS and isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name) and func.id in ("hasattr", "getattr") and node.args:
                    if "backend" in ast.unparse(node.args[0]):
                        house.probes.append(f"{name}:{node.lineno}")
            if name.split("/")[0] in FRONT_ENDS and _asks_what_a_backend_is(node):
                house.probes.append(f"{name}:{node.lineno}")
        if name not in EDGE:
            house.chains += [f"{name}:{i}" for i, line in enumerate(source.splitlines(), 1) if CHAIN.search(line)]
    return house


def main() -> None:
    import sys
    from collections import Counter

    house = count()
    if "--verbose" in sys.argv:
        for file, n in Counter(w.split(":")[0] for w in house.with_any).most_common():
            print(f"Any {n:3d} {file}")
        for file, n in Counter(w.split(":")[0] for w in house.chains).most_common():
            print(f"chains {n:3d} {file}")
    print(f"product functions: {house.functions}")
    print(f"  with Any in their signature: {len(house.with_any)}")
    print(f"(x.get(...) or {{}}) chains outside the edge: {len(house.chains)}")
    print(f"functions over {LONG} lines: {len(house.long)}")
    for where, lines in sorted(house.long, key=lambda x: -x[1]):
        print(f"  {lines:4d} {where}")
    print(f"front ends asking a backend what it is: {len(house.probes)}")
    for where in house.probes:
        print(f"  {where}")


if __name__ == "__main__":
    main()
