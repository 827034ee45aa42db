"""The code folder a user job ships to a cluster, as one gzipped tar: the same
files give the same bytes (sorted, no times or owners), so the archive's
SHA-256 names it and an unchanged folder is never sent twice.

What goes in: every regular file under the folder, less what its
``.gitignore`` and ``.dockerignore`` exclude (the common forms: ``*``, ``?``,
``**``, a leading ``/`` to anchor, a trailing ``/`` for folders only, ``!`` to
take back) and what never belongs in a job (``.git``, virtual environments,
caches). Symbolic links are left out: the pods get this folder, not the
machine around it.

How it travels (``route``): in a ConfigMap where it fits Kubernetes' 1 MiB
object limit, else through an S3 prefix the pods can read; either way an init
container checks its digest and unpacks it into the pods' working directory
(``manifests/_pod.yaml.j2``)."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from .errors import SpecError

MAX_BUNDLE = 64 * 2**20
"""Bytes of files a code folder may hold: code, not data (a dataset goes on the shared volume)."""
CONFIGMAP_LIMIT = 700 * 1024
"""The largest archive that travels in a ConfigMap: base64 makes it 4/3 larger, and the whole
object must stay under Kubernetes' 1 MiB."""
ALWAYS_LEFT_OUT = (".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", ".venv/", "venv/", ".mypy_cache/",
                   ".pytest_cache/", ".ruff_cache/", ".ipynb_checkpoints/", ".DS_Store", ".torchdeck/",
                   "/torchdeck.yaml")  # fmt: skip
"""Never shipped: version control, environments, caches, and the job spec (pinning an image in it
must not make the code look changed)."""
IGNORE_FILES = (".gitignore", ".dockerignore")
CODE_ROOT = "/workspace"
"""Where the pods unpack the bundle: CODE_ROOT/code is the working directory, CODE_ROOT/deps the
requirements."""
CODE_DIR = f"{CODE_ROOT}/code"
DEPS_DIR = f"{CODE_ROOT}/deps"
BUNDLE_DIR = "/torchdeck-bundle"
BUNDLE_FILE = "code.tar.gz"


@dataclass(frozen=True)
class Rule:
    regex: re.Pattern[str]
    negate: bool
    folders_only: bool


def _rule(line: str, anchored_always: bool = False) -> Rule | None:
    """One ignore line; ``anchored_always``: .dockerignore's patterns start at the folder's root."""
    line = line.rstrip("\n").rstrip()
    if not line or line.startswith("#"):
        return None
    negate = line.startswith("!")
    line = line[1:] if negate else line
    folders_only = line.endswith("/")
    line = line.strip("/") if folders_only else line
    anchored = anchored_always or "/" in line.lstrip("/") or line.startswith("/")
    line = line.lstrip("/")
    if not line:
        return None
    parts = []
    for piece in re.split(r"(\*\*/|/\*\*|\*\*)", line):
        if piece == "**/":
            parts.append(r"(?:.*/)?")
        elif piece == "/**":
            parts.append(r"(?:/.*)?")
        elif piece == "**":
            parts.append(r".*")
        else:
            parts.append(_glob(piece))
    body = "".join(parts)
    prefix = "" if anchored else r"(?:.*/)?"
    return Rule(re.compile(rf"^{prefix}{body}$"), negate, folders_only)


def _glob(text: str) -> str:
    """One path piece of a glob as a regular expression: ``*`` and ``?`` stop at ``/``."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in text[i + 2 :]:
            end = text.index("]", i + 2)
            inner = text[i + 1 : end]
            out.append("[" + ("^" + inner[1:] if inner[:1] == "!" else inner).replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _rules(root: Path) -> list[Rule]:
    rules = [r for line in ALWAYS_LEFT_OUT if (r := _rule(line))]
    for name in IGNORE_FILES:
        try:
            text = (root / name).read_text(errors="replace")
        except OSError:
            continue
        rules += [r for line in text.splitlines() if (r := _rule(line, name == ".dockerignore"))]
    return rules


def _ignored(rules: list[Rule], relative: str, is_dir: bool) -> bool:
    ignored = False
    for rule in rules:
        if rule.folders_only and not is_dir:
            continue
        if rule.regex.match(relative):
            ignored = not rule.negate
    return ignored


def code_files(root: Path) -> list[Path]:
    """The files that go in the bundle, sorted by their path in the folder."""
    rules = _rules(root)
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        rel_dir = here.relative_to(root).as_posix()
        keep = []
        for name in sorted(dirs):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if not (here / name).is_symlink() and not _ignored(rules, rel, True):
                keep.append(name)
        dirs[:] = keep
        for name in files:
            path = here / name
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if path.is_symlink() or not path.is_file() or _ignored(rules, rel, False):
                continue
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


@dataclass(frozen=True)
class Bundle:
    """A code folder packed: the archive, its digest and what is in it."""

    data: bytes
    sha256: str
    files: int
    size: int
    """Bytes of the files, before compression."""
    source: str

    @property
    def configmap(self) -> str:
        """The ConfigMap that carries it (its name holds the digest: content-addressed)."""
        return f"torchdeck-code-{self.sha256[:20]}"

    def key(self, prefix: str) -> str:
        """Its object key under an S3 prefix."""
        return f"{prefix.strip('/')}/{self.sha256}.tar.gz".lstrip("/")

    @property
    def fits_configmap(self) -> bool:
        return len(self.data) <= CONFIGMAP_LIMIT


def pack(folder: str | Path, limit: int | None = None) -> Bundle:
    """The bundle of ``folder``; SpecError (one line, the largest files named) where the folder is
    not there or holds more than ``limit`` bytes."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise SpecError("entrypoint.code", f"{root} is not a folder", "set entrypoint.code to your code's folder")
    limit = MAX_BUNDLE if limit is None else limit
    files = code_files(root)
    sizes = [(p.stat().st_size, p) for p in files]
    total = sum(s for s, _ in sizes)
    if total > limit:
        biggest = ", ".join(
            f"{p.relative_to(root).as_posix()} ({s / 2**20:.1f} MiB)" for s, p in sorted(sizes, reverse=True)[:3]
        )
        raise SpecError(
            "entrypoint.code",
            f"{root} holds {total / 2**20:.1f} MiB of files to ship, over the {limit / 2**20:.0f} MiB a code "
            f"folder may (largest: {biggest})",
            "leave data and outputs out with .dockerignore or .gitignore (datasets belong on the shared "
            "volume), or point entrypoint.code at a smaller folder",
        )
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=6) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for _, path in sizes:
                data = path.read_bytes()
                info = tarfile.TarInfo(path.relative_to(root).as_posix())
                info.size, info.mtime = len(data), 0
                info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
                tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    return Bundle(data, hashlib.sha256(data).hexdigest(), len(files), total, str(root))


UNPACK = """\
import hashlib, os, sys, tarfile
src, digest, dest = sys.argv[1:4]
data = open(src, "rb").read()
if hashlib.sha256(data).hexdigest() != digest:
    sys.exit(f"torchdeck: the code bundle {src} is not {digest[:12]}: it changed on the way")
os.makedirs(dest, exist_ok=True)
with tarfile.open(src) as tar:
    for m in tar.getmembers():
        parts = m.name.split("/")
        if not m.isfile() or m.name.startswith("/") or ".." in parts:
            sys.exit(f"torchdeck: the code bundle holds {m.name!r}, which stays out of {dest}")
        target = os.path.join(dest, *parts)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with tar.extractfile(m) as f, open(target, "wb") as out:
            out.write(f.read())
        os.chmod(target, m.mode & 0o755)
print(f"torchdeck: unpacked the code bundle {digest[:12]} into {dest}")
"""
"""What the init container runs (``python -c``): the standard library only, so any image with a
Python runs it. It checks the digest, and writes regular files only, inside the working directory."""
