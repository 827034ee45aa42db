"""The README and the guides cannot drift from the code: every ``torchdeck`` command they show
parses with torchdeck's own parser (its flags exist), every command in a block marked
``sh runnable`` runs (``test_the_runnable_commands_run``), every module and name
docs/ARCHITECTURE.md points at exists, docs/SPEC.md's field table is the one the declarations
make, every guide is linked from the README, and CONTRIBUTING.md names the releases the real
cluster runs as manifests/versions.toml declares them."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import tomllib

from torchdeck.backends.spec import spec_reference
from torchdeck.cli.main import build_parser

REPO = Path(__file__).resolve().parent.parent.parent
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([\w-]*)(?: +(\w+))?\n(.*?)^```\n", re.M | re.S)


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """The fenced blocks of a page: (language, mark, text); ``sh runnable`` is a block the docs test runs."""
    return [(m.group(1), m.group(2) or "", m.group(3)) for m in FENCE.finditer(page.read_text())]


def commands(text: str) -> list[str]:
    """A shell block's command lines (continuations joined, comments and prompts dropped)."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        if pending:
            line, pending = pending + " " + line, ""
        if line.endswith("\\"):
            pending = line[:-1].strip()
            continue
        if line and not line.startswith("#"):
            out.append(line)
    return out


def torchdeck_argv(line: str) -> list[list[str]]:
    """The ``torchdeck`` invocations of one command line (after ``&&``, ``|`` or ``;`` too), each
    as its arguments; a line with a placeholder a reader fills in (``...``) is left out."""
    if "..." in line or "$(" in line:
        return []
    found = []
    for part in re.split(r"\s*(?:&&|\|\||\||;)\s*", line):
        words = shlex.split(part, comments=True)
        while words and "=" in words[0] and not words[0].startswith("-"):  # VAR=value torchdeck ...
            words = words[1:]
        if words and words[0] == "torchdeck":
            found.append(words[1:])
    return found


def shown_commands() -> list[tuple[str, str]]:
    return [
        (f"{page.name}: {line}", line)
        for page in PAGES
        for language, _, text in blocks(page)
        if language in ("", "sh", "bash", "console", "shell")
        for line in commands(text)
        if language
        or line.startswith(("torchdeck", "./scripts/", "scripts/", "sudo scripts/"))  # a bare block: a picture too
    ]


def test_every_torchdeck_command_the_docs_show_parses() -> None:
    shown = [(where, argv) for where, line in shown_commands() for argv in torchdeck_argv(line)]
    assert len(shown) > 40, "the docs' commands were not found"
    bad = []
    for where, argv in shown:
        if "--" in argv:  # the user's script's own arguments, as main() cuts them
            argv = argv[: argv.index("--")]
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code:
                bad.append(where)
    assert bad == [], "\n".join(bad)


def test_the_scripts_the_docs_run_exist() -> None:
    missing = []
    for where, line in shown_commands():
        for word in shlex.split(line, comments=True) if "$(" not in line else []:
            if word.startswith(("./scripts/", "scripts/", "benchmarks/")) and not (REPO / word).exists():
                missing.append(f"{where} ({word})")
    assert missing == []


def test_architecture_names_only_modules_and_names_that_exist() -> None:
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    paths = set(
        re.findall(r"`((?:backends|cli|tui|monitor|trainer|manifests|docker|tests|scripts|benchmarks)/[\w./-]*)", text)
    )
    assert len(paths) > 40
    assert sorted(p for p in paths if not (REPO / p.split(":")[0]).exists()) == []
    # `path.py`: `name` and `path.py:name`: the name is defined there
    named = re.findall(r"`([\w/]+\.py)`: `(\w+)`", text) + re.findall(r"`([\w/]+\.py):(\w+)`", text)
    assert len(named) > 20
    undefined = [
        f"{path}: {name}"
        for path, name in named
        if (REPO / path).exists()
        and not re.search(rf"^\s*(?:async def|def|class) {name}\b|^{name}\b.*=", (REPO / path).read_text(), re.M)
    ]
    assert undefined == []


def test_architecture_describes_the_house_as_it_is() -> None:
    """Issue 53: the guide names every capability a backend can declare (and which backend declares
    which), every job kind's object, and every module at the edge where answers become types; and the
    counts it promises hold (tests/unit/test_house.py holds them too)."""
    from house import EDGE, count

    from torchdeck.backends.capabilities import CAPABILITIES
    from torchdeck.backends.kubernetes.backend import KubernetesBackend
    from torchdeck.backends.kubernetes.kinds import JOB_KINDS
    from torchdeck.backends.local import LocalBackend

    text = " ".join((REPO / "docs" / "ARCHITECTURE.md").read_text().split())
    assert [c.__name__ for c in CAPABILITIES if f"`{c.__name__}`" not in text] == []
    local = text.split("The local backend declares", 1)[1].split(";", 1)[0]
    assert [c.__name__ for c in CAPABILITIES if issubclass(LocalBackend, c) and f"`{c.__name__}`" not in local] == []
    assert "kubernetes backend all but `BudgetChange`" in text
    assert {c.__name__ for c in CAPABILITIES if issubclass(KubernetesBackend, c)} == {
        c.__name__ for c in CAPABILITIES if c.__name__ != "BudgetChange"
    }
    assert [type(k).__name__ for k in JOB_KINDS.values() if f"`{type(k).__name__}`" not in text] == []
    assert [path for path in EDGE if path.rsplit("/", 1)[-1] not in text] == []
    house = count()
    assert house.probes == [] and house.chains == [] and "never asks which backend it has" in text


def test_the_spec_page_holds_the_table_the_declarations_make() -> None:
    assert spec_reference() in (REPO / "docs" / "SPEC.md").read_text(), "run: torchdeck init --reference"


def test_every_guide_is_linked_from_the_readme_and_every_picture_exists() -> None:
    readme = (REPO / "README.md").read_text()
    guides = {p.name for p in (REPO / "docs").glob("*.md")}
    assert {g for g in guides if f"docs/{g}" not in readme} == set()
    for page in PAGES:
        base = page.parent
        for target in re.findall(r"\]\(([^)#\s]+)\)", page.read_text()):
            if "://" not in target:
                assert (base / target).exists(), f"{page.name} links to {target}, which is not there"
    assert len(readme.splitlines()) <= 220, "the README stays a few screens long: the rest goes to a guide"


CLUSTER_MODULES = {
    "k8s.io/kubernetes": "kubernetes",
    "github.com/containerd/containerd/v2": "containerd",
    "github.com/opencontainers/runc": "runc",
    "github.com/containernetworking/plugins": "cni_plugins",
    "github.com/coredns/coredns": "coredns",
    "sigs.k8s.io/metrics-server": "metrics_server",
    "github.com/kubeflow/training-operator": "training_operator",
    "sigs.k8s.io/jobset": "jobset",
    "github.com/kubeflow/trainer/v2": "trainer",
    "github.com/kubeflow/mpi-operator": "mpi_operator",
    "sigs.k8s.io/kueue": "kueue",
    "github.com/distribution/distribution/v3": "registry",
}
"""The Go module each row of CONTRIBUTING.md's cluster table is built from, and its name in versions.toml."""


def test_contributing_names_the_releases_versions_toml_declares() -> None:
    tables = tomllib.loads((REPO / "manifests" / "versions.toml").read_text())
    declared = {**tables["cluster"], **tables["operators"]}
    text = (REPO / "CONTRIBUTING.md").read_text()
    rows = re.findall(r"^\| [^|]+ \| ([0-9][0-9.]*)[^|]* \| `([\w./-]+)`", text, re.M)
    shown = {CLUSTER_MODULES[module]: "v" + version for version, module in rows if module in CLUSTER_MODULES}
    assert shown == {name: declared[name] for name in CLUSTER_MODULES.values()}
    for name, label in (("trainer", "Trainer"), ("jobset", "JobSet"), ("mpi_operator", "MPI Operator"),
                        ("kueue", "Kueue")):  # fmt: skip
        assert f"{label} {declared[name]}" in text, (label, declared[name])
    minor = declared["kubernetes"].removeprefix("v").rsplit(".", 1)[0]
    assert f"Why {minor}:" in text


@pytest.mark.slow
def test_the_runnable_commands_run(tmp_path, cifar_dir, kube_api, monkeypatch) -> None:
    """Every block marked ``sh runnable`` runs, in order, as a reader would run it: in a fresh
    folder holding the CIFAR-10 subset as ``data/`` and the examples, with ``torchdeck`` on the
    PATH, the environment with torch activated, a state folder of its own, and a Kubernetes cluster (kmock, prepared as the guides say)
    in the kubeconfig."""
    import os
    import subprocess
    import sys

    from kube_jobs import install
    from shims import path_with

    from torchdeck.backends.kubernetes.backend import KubernetesBackend

    install(KubernetesBackend(kube_api.kubeconfig))
    work = tmp_path / "work"
    work.mkdir()
    (work / "data").symlink_to(cifar_dir)
    (work / "examples").symlink_to(REPO / "examples")
    bin_dir = path_with(tmp_path / "bin", {"torchdeck": [sys.executable, "-m", "torchdeck"]})
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "TORCHDECK_STATE_DIR": str(tmp_path / "state"),
        "KUBECONFIG": str(kube_api.kubeconfig),
        "VIRTUAL_ENV": str(Path(sys.executable).parent.parent),  # the reader's activated environment
    }
    for key in ("TORCHDECK_SPEC", "TORCHDECK_BACKEND", "TORCHDECK_KUBECONFIG", "TORCHDECK_KUBE_CONTEXT"):
        env.pop(key, None)
    ran = 0
    for page in PAGES:
        for _, mark, text in blocks(page):
            if mark != "runnable":
                continue
            for line in commands(text):
                done = subprocess.run(
                    ["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=600
                )
                assert done.returncode == 0, f"{page.name}: {line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
                ran += 1
    assert ran >= 8, "the README's tour was not found"
