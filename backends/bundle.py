"""The code folder a user job ships to a cluster, as one gzipped tar: the same
files give the same bytes (sorted, no times or owners), so the archive's
SHA-256 names it and an unchanged folder is never sent twice.

What goes in: every regular file under the folder, less what its
``.gitignore`` excludes (git's own rules, through pathspec), what its
``.dockerignore`` excludes (the same rules anchored at the folder, as Docker
reads them) and what never belongs in a job (``.git``, virtual environments,
caches). Symbolic links, FIFOs and devices are left out: the pods get this
folder, not the machine around it.

How it travels (``route``): in a ConfigMap where it fits Kubernetes' 1 MiB
object limit, else through an S3 prefix the pods can read; either way an init
container checks its digest and unpacks it into the pods' working directory
(``manifests/_pod.yaml.j2``)."""

from __future__ import annotations

import ast
import gzip
import hashlib
import io
import os
import re
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pathspec

from .errors import SpecError
from .files import read_text

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


MAX_IGNORE_FILE = 256 * 1024
"""Bytes of an ignore file: patterns a person writes."""


@dataclass(frozen=True)
class IgnoreRules:
    """What a code folder leaves out: torchdeck's own list, its ``.gitignore`` and its
    ``.dockerignore`` (each excludes on its own), matched as git and Docker match them by pathspec
    on RE2, so no pattern can backtrack (``*a*a*a*a*a*a*a*a*a*a*a*b`` against a 40-character name
    hung the pack on Python's engine)."""

    specs: tuple[pathspec.GitIgnoreSpec, ...]

    def ignored(self, relative: str, is_dir: bool) -> bool:
        path = relative + "/" if is_dir else relative
        return any(spec.match_file(path) for spec in self.specs)


def _spec(lines: list[str], source: str) -> pathspec.GitIgnoreSpec:
    """A GitIgnoreSpec of ``lines``; a line that is no pattern is one SpecError naming it."""
    import pathspec

    try:
        return pathspec.GitIgnoreSpec.from_lines(lines, backend="re2")
    except Exception:  # noqa: BLE001 - pathspec raises re's and re2's errors: find the line and say why
        for number, line in enumerate(lines, 1):
            try:
                pathspec.GitIgnoreSpec.from_lines([line], backend="re2")
            except Exception as exc:  # noqa: BLE001
                raise SpecError(
                    "entrypoint.code",
                    f"{source} line {number}: {line[:80]!r} is not a pattern git or Docker takes ({exc})",
                    f"fix or remove that line of {source}",
                ) from None
        raise


def _docker_lines(text: str) -> list[str]:
    """.dockerignore's patterns start at the folder's root: as anchored gitignore lines."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate, line = (True, line[1:]) if line.startswith("!") else (False, line)
        out.append(("!" if negate else "") + "/" + line.lstrip("/"))
    return out


def ignore_rules(root: Path) -> IgnoreRules:
    """The rules of the folder ``root``; its ignore files pass torchdeck's file reader (a regular
    file inside the folder, at most MAX_IGNORE_FILE bytes: a FIFO hung the pack, and a link to
    /dev/zero filled memory)."""
    specs = [_spec(list(ALWAYS_LEFT_OUT), "torchdeck's list")]
    for name in IGNORE_FILES:
        try:
            text = read_text(
                root / name, MAX_IGNORE_FILE, inside=root, hint=f"make {name} a small text file of patterns"
            )
        except FileNotFoundError:
            continue
        lines = _docker_lines(text) if name == ".dockerignore" else text.splitlines()
        specs.append(_spec(lines, name))
    return IgnoreRules(tuple(specs))


def code_files(root: Path) -> list[Path]:
    """The files that go in the bundle, sorted by their path in the folder."""
    rules = ignore_rules(root)
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        rel_dir = here.relative_to(root).as_posix()
        keep = []
        for name in sorted(dirs):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if not (here / name).is_symlink() and not rules.ignored(rel, True):
                keep.append(name)
        dirs[:] = keep
        for name in files:
            path = here / name
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if path.is_symlink() or not path.is_file() or rules.ignored(rel, False):
                continue
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


class CodeStore(Protocol):
    """Where a code bundle too large for a ConfigMap goes (an object store, by URL), handed to the
    kubernetes backend by whoever opens it: S3 (``eks/code_store.py``) for an s3:// bucket. The
    backend itself imports no cloud SDK."""

    def put(self, url: str, data: bytes) -> bool:
        """Store ``data`` at ``url`` unless it is there already (its key is its digest); whether it
        was sent. BackendError, with a hint, where it cannot be."""
        ...


@dataclass(frozen=True)
class Bundle:
    """A code folder packed: the archive, its digest and what is in it."""

    data: bytes
    sha256: str
    files: int
    size: int
    """Bytes of the files, before compression."""
    source: str
    outputs: tuple[tuple[str, int], ...] = ()
    """Large model-like files in it (path, bytes): a previous run's outputs, most likely."""

    def outputs_warning(self) -> str | None:
        """One line naming the large model-like files shipped, with the ignore lines that leave them out."""
        if not self.outputs:
            return None
        named = ", ".join(f"{path} ({size / 2**20:.1f} MiB)" for path, size in self.outputs[:3])
        more = f" and {len(self.outputs) - 3} more" if len(self.outputs) > 3 else ""
        patterns = " ".join(sorted({"**/*" + Path(path).suffix for path, _ in self.outputs}))  # any depth
        return (
            f"the code bundle holds {named}{more}: outputs of an earlier run? "
            f"lines {patterns} in .dockerignore leave them out"
        )

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


RELAY_DIR = ".torchdeck"
"""Where a bundle carries torchdeck's relay (``trainer/relay.py``) and what it needs: the pods run
the user's code through it."""
RELAY_FILES = (
    "relay.py",
    "kubeflow_status.py",
    "logfiles.py",
    "regular_files.py",
    "rewrites.py",
    "textmetrics.py",
    "tracebacks.py",
    "triage_probe.py",
    "exitmark/sitecustomize.py",
)


def relay_files() -> dict[str, bytes]:
    """The relay and the modules it uses, as the bundle carries them (standard library only)."""
    here = Path(__file__).resolve().parent.parent / "trainer"
    return {f"{RELAY_DIR}/{name}": (here / name).read_bytes() for name in RELAY_FILES}


def pack(folder: str | Path, limit: int | None = None, extra: dict[str, bytes] | None = None) -> Bundle:
    """The bundle of ``folder`` (with ``extra`` files, by their path in it: the relay); SpecError
    (one line, the largest files named) where the folder is not there or holds more than ``limit``
    bytes."""
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
                name = path.relative_to(root).as_posix()
                try:
                    data = path.read_bytes()
                    name.encode()
                except (OSError, UnicodeEncodeError) as exc:
                    why = exc.strerror if isinstance(exc, OSError) else "its name is not UTF-8"
                    raise SpecError(
                        "entrypoint.code",
                        f"{root}: cannot pack {name.encode(errors='backslashreplace').decode()!r}: {why}",
                        "rename it, make it readable, or leave it out with .dockerignore",
                    ) from None
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), 0
                info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
                tar.addfile(info, io.BytesIO(data))
            for name, data in sorted((extra or {}).items()):
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    outputs = tuple(
        (p.relative_to(root).as_posix(), size)
        for size, p in sorted(sizes, reverse=True)
        if size >= OUTPUT_SIZE and p.suffix.lower() in OUTPUT_SUFFIXES
    )
    return Bundle(data, hashlib.sha256(data).hexdigest(), len(files) + len(extra or {}), total, str(root), outputs)


OUTPUT_SUFFIXES = frozenset({".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".h5", ".onnx", ".npz"})
OUTPUT_SIZE = 1 << 20
"""A model-like file this large in a code folder is an output, not code: the bundle warns of it."""
PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"__future__"}
IMPORT_NAMES = {
    "scikit-learn": "sklearn", "pillow": "PIL", "pyyaml": "yaml", "opencv-python": "cv2",
    "opencv-python-headless": "cv2", "beautifulsoup4": "bs4", "python-dateutil": "dateutil",
    "protobuf": "google", "pytorch-lightning": "pytorch_lightning", "tensorboardx": "tensorboardX",
}  # fmt: skip
"""Packages whose import name is not their name on PyPI."""


def project_root(start: Path, stop: Path | None = None) -> Path | None:
    """The project a folder is part of: the nearest folder at or above ``start`` holding a git
    repository, a ``pyproject.toml``, a ``setup.py`` or a ``setup.cfg``; None below ``stop`` (the
    home folder) or the file system's root."""
    stop = (stop or Path.home()).resolve()
    here = start.resolve()
    while True:
        if any((here / marker).exists() for marker in PROJECT_MARKERS):
            return here
        if here == stop or here.parent == here:
            return None
        here = here.parent


def script_imports(script: Path) -> list[str]:
    """The top-level packages a script imports at its top level or under a top-level ``if`` (``if
    __name__ == "__main__":``); not those inside functions, nor those inside a ``try`` that may
    catch their absence. [] where it does not parse."""
    try:
        tree = ast.parse(script.read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError):
        return []
    statements = [*tree.body, *(sub for node in tree.body if isinstance(node, ast.If) for sub in node.body)]
    found: list[str] = []
    for node in statements:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [top for top in (name.split(".", 1)[0] for name in names) if top not in found]
    return found


def unresolved_imports(code: Path, script: str, requirements: str | None) -> list[str]:
    """The entry script's top-level imports that neither the code folder (beside the script or at
    its root), its requirements file nor the standard library provide: the interpreter or the image
    must have them."""
    path = code / script
    places = [path.parent, code]
    wanted = set()
    if requirements:
        try:
            text = (code / requirements).read_text(errors="replace")
        except OSError:
            text = ""
        for line in text.splitlines():
            name = re.split(r"[\s<>=!~;\[@]", line.strip(), maxsplit=1)[0].lower()
            if name and not name.startswith(("#", "-")):
                wanted.add(IMPORT_NAMES.get(name, name.replace("-", "_")))
    missing = []
    for top in script_imports(path):
        if top in STDLIB or top.lower() in wanted or top in ("torch", "torchdeck"):
            continue
        if any((place / f"{top}.py").is_file() or (place / top / "__init__.py").is_file() for place in places):
            continue
        if any((place / top).is_dir() for place in places):  # a namespace package
            continue
        missing.append(top)
    return missing


UNPACK = """\
import hashlib, os, shutil, sys, tarfile
src, digest, dest = sys.argv[1:4]
data = open(src, "rb").read()
if hashlib.sha256(data).hexdigest() != digest:
    sys.exit(f"torchdeck: the code bundle {src} is not {digest[:12]}: it changed on the way")
def clear(path):
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)
os.makedirs(dest, exist_ok=True)
with tarfile.open(src) as tar:
    for m in tar.getmembers():
        parts = m.name.split("/")
        if not m.isfile() or not m.name or m.name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            sys.exit(f"torchdeck: the code bundle holds {m.name!r}, which stays out of {dest}")
        here = dest
        for part in parts[:-1]:
            here = os.path.join(here, part)
            if os.path.islink(here) or (os.path.lexists(here) and not os.path.isdir(here)):
                os.unlink(here)
            os.makedirs(here, exist_ok=True)
        target = os.path.join(here, parts[-1])
        clear(target)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with tar.extractfile(m) as f, os.fdopen(fd, "wb") as out:
            out.write(f.read())
        os.chmod(target, m.mode & 0o755)
print(f"torchdeck: unpacked the code bundle {digest[:12]} into {dest}")
"""
"""What the init container runs (``python -c``): the standard library only, so any image with a
Python runs it. It checks the digest, and writes regular files only, inside the working directory:
a restarted pod unpacks into the emptyDir its last run left, so a link found on the way (one the
user's code made, to /etc say) is removed, never followed, and a member named ``.``, ``..`` or with
an empty part is refused in one line."""
