"""Every file torchdeck reads that a user or a cluster handed it, and every file it writes
where a user pointed it: one gate each way.

Reading (``read_bytes``, ``read_text``, ``load_yaml``, ``load_json``): regular files only
(a FIFO would hang the read, ``/dev/zero`` would fill memory), the size measured before a
byte is read, and a link that leads out of the folder refused where the folder is the point
(an ignore file); YAML without aliases, and YAML and JSON nested at most ``MAX_DEPTH`` deep,
with numbers of at most ``MAX_DIGITS`` digits and no infinities. Every failure is one
``SpecError`` line naming the file.

Writing (``write_atomically``): the file is whole or not there, the temporary file is made
exclusively (``O_EXCL``, a random name, 0600) beside the file it replaces, never at a fixed
name that a planted symlink could redirect, and nothing is written through a link unless the
caller asks (a kubeconfig, ``~/.kube/config -> dotfiles/kubeconfig``, is replaced where the link
points and the link stays). ``replace=False`` creates the file or fails: a dangling link at the
path is not followed to a file elsewhere."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

from torchdeck.trainer.regular_files import NotRegularFile, open_regular

from .errors import SpecError, file_problem

MAX_TEXT_FILE = 1 << 20
"""Bytes of a spec, manifest, plan, settings file or kubeconfig: text a person writes."""
MAX_DEPTH = 64
"""Levels of nesting in YAML or JSON a user hands in: a manifest uses a dozen; 200,000 brackets
were a RecursionError."""
MAX_DIGITS = 40
"""Digits of a number in a file: more is no count or size torchdeck takes (5,000 digits were a
ValueError from Python's int, and a float of 400 digits an infinity)."""


def size_words(n: int) -> str:
    """A count of bytes as a person reads it: ``16 MiB``, ``44.8 KiB``, ``27 B``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_bytes(
    path: str | Path, max_bytes: int = MAX_TEXT_FILE, *, inside: Path | None = None, hint: str = ""
) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``, measured before reading.

    ``inside``: the folder the file must stay in once links are followed (an ignore file that
    links to ``/etc/passwd`` or ``/dev/zero`` is not the folder's). FileNotFoundError passes
    through (callers often take a missing file as empty); anything else is a SpecError."""
    path = Path(path)
    source = str(path)
    if inside is not None:
        real, root = os.path.realpath(path), os.path.realpath(inside)
        if os.path.commonpath([real, root]) != root:
            raise SpecError("", f"is a link out of {inside}", hint or "make it a file of its own", source)
    try:
        f = open_regular(path)
    except FileNotFoundError:
        raise
    except NotRegularFile as exc:
        raise SpecError("", f"is {exc.kind}, not a file torchdeck reads", hint, source) from None
    except OSError as exc:
        raise SpecError("", f"cannot read it: {exc.strerror or exc}", hint, source) from None
    try:
        with f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise SpecError("", f"is {size:,} bytes; at most {max_bytes:,} are read", hint, source)
            chunks = [f.read(max_bytes + 1)]  # it may grow while read
    except OSError as exc:
        raise SpecError("", f"cannot read it: {exc.strerror or exc}", hint, source) from None
    data = b"".join(chunks)
    if len(data) > max_bytes:  # it grew while read
        raise SpecError("", f"is over {max_bytes:,} bytes; at most {max_bytes:,} are read", hint, source)
    return data


def read_text(path: str | Path, max_bytes: int = MAX_TEXT_FILE, *, inside: Path | None = None, hint: str = "") -> str:
    """``read_bytes`` as UTF-8 text; a file that is not text is one line."""
    data = read_bytes(path, max_bytes, inside=inside, hint=hint)
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise SpecError("", "is not text (UTF-8)", hint, str(path)) from None


def read_stdin_text(hint: str = "", max_bytes: int = MAX_TEXT_FILE) -> str:
    """Standard input as text, at most ``max_bytes`` of it (``< /dev/zero`` ends, and says so)."""
    import sys

    data = sys.stdin.buffer.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SpecError("", f"is over {max_bytes:,} bytes; at most {max_bytes:,} are read", hint, "standard input")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise SpecError("", "is not text (UTF-8)", hint, "standard input") from None


@functools.cache
def bounded_loader() -> type[yaml.SafeLoader]:
    """The YAML loader every reader uses (made on first use: the console's first frame imports no
    YAML): safe_load without anchors and aliases (a few hundred bytes of aliases expand to
    gigabytes), nested at most MAX_DEPTH deep, with numbers of a sane size."""
    import yaml

    class _BoundedLoader(yaml.SafeLoader):
        """safe_load without anchors and aliases (a few hundred bytes of aliases expand to
        gigabytes), nested at most MAX_DEPTH deep, with numbers of a sane size."""

        depth = 0

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, "YAML aliases (*name) are not taken here: write the value out", event.start_mark
                )
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise yaml.composer.ComposerError(
                        None, None, f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark
                    )
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
            _check_number(self, node)
            return super().construct_yaml_int(node)

        def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
            _check_number(self, node)
            value = super().construct_yaml_float(node)
            if value != value or value in (float("inf"), float("-inf")):
                raise yaml.constructor.ConstructorError(
                    None, None, f"{node.value!r} is not a finite number", node.start_mark
                )
            return value

    def _check_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> None:
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"a number of {digits} digits (at most {MAX_DIGITS})", node.start_mark
            )

    _BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)
    _BoundedLoader.add_constructor("tag:yaml.org,2002:float", _BoundedLoader.construct_yaml_float)

    return _BoundedLoader


def parse_yaml(text: str, source: str = "", *, all_documents: bool = False, max_bytes: int = MAX_TEXT_FILE) -> Any:
    """YAML a user or a cluster handed in (a spec, a manifest, a plan, settings, a kubeconfig, a
    ``--set`` value), read through the bounded loader; SpecError in one line naming ``source``."""
    import yaml

    if len(text) > max_bytes:
        raise SpecError("", f"is {len(text):,} characters; at most {max_bytes:,} are read", "", source)
    loader = bounded_loader()
    try:
        if all_documents:
            return list(yaml.load_all(text, Loader=loader))  # noqa: S506 (a SafeLoader)
        return yaml.load(text, Loader=loader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise SpecError(
            "", f"not valid YAML: {file_problem(exc)}", "check the indentation and quoting", source
        ) from None
    except RecursionError:  # defence in depth: the loader's depth bound comes first
        raise SpecError("", f"nested more than {MAX_DEPTH} levels deep", "", source) from None


def load_yaml(path: str | Path, *, all_documents: bool = False, max_bytes: int = MAX_TEXT_FILE, hint: str = "") -> Any:
    """A YAML file through both gates: ``read_text`` then ``parse_yaml``."""
    return parse_yaml(
        read_text(path, max_bytes, hint=hint), str(path), all_documents=all_documents, max_bytes=max_bytes
    )


def _json_int(text: str) -> int:
    if len(text) > MAX_DIGITS + 1:
        raise ValueError(f"a number of {len(text)} digits (at most {MAX_DIGITS})")
    return int(text)


def _json_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON has")


def parse_json(text: str | bytes, source: str = "", *, max_bytes: int = MAX_TEXT_FILE) -> Any:
    """JSON a user or a cluster handed in, bounded as ``parse_yaml``; SpecError naming ``source``."""
    if len(text) > max_bytes:
        raise SpecError("", f"is {len(text):,} bytes; at most {max_bytes:,} are read", "", source)
    depth = json_depth(text if isinstance(text, str) else text.decode(errors="replace"))
    if depth > MAX_DEPTH:
        raise SpecError("", f"nested more than {MAX_DEPTH} levels deep", "", source)
    try:
        return json.loads(text, parse_int=_json_int, parse_constant=_json_constant)
    except (ValueError, RecursionError) as exc:
        raise SpecError("", f"not valid JSON: {str(exc).splitlines()[0][:200]}", "", source) from None


def json_depth(text: str) -> int:
    """The deepest nesting of brackets outside strings (linear; JSON's own parser recurses)."""
    deepest = level = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            level += 1
            deepest = max(deepest, level)
        elif c in "]}":
            level -= 1
    return deepest


def load_json(path: str | Path, *, max_bytes: int = MAX_TEXT_FILE, hint: str = "") -> Any:
    """A JSON file through both gates: ``read_bytes`` then ``parse_json``."""
    return parse_json(read_bytes(path, max_bytes, hint=hint), str(path), max_bytes=max_bytes)


def write_atomically(
    path: Path, data: bytes | str, mode: int | None = None, *, replace: bool = True, follow_link: bool = False
) -> None:
    """Write ``path`` with ``data`` in one rename, so a reader never sees half of it.

    ``mode``: the new file's permissions; None keeps an existing file's, or gives a new one what
    ``open`` would (0666 less the umask). ``replace=False``: the file must not exist yet (nor a
    link, dangling or not): FileExistsError. A link at ``path`` is replaced by the file, never
    written through, unless ``follow_link`` (then it must lead to an existing regular file, which
    is replaced and the link stays). An OSError names ``path``, not the temporary file."""
    path = Path(path)
    target = path
    try:
        if path.is_symlink() and follow_link and replace:
            real = Path(os.path.realpath(path))
            if not real.is_file():
                raise OSError(errno.ENOENT, f"it is a link to {real}, which is not a file", str(path))
            target = real
        payload = data.encode() if isinstance(data, str) else data
        if mode is None:
            try:
                mode = target.stat().st_mode & 0o7777 if not target.is_symlink() else 0o666 & ~_umask()
            except FileNotFoundError:
                mode = 0o666 & ~_umask()
        import tempfile  # a write's, not a read's: the console's first frame writes nothing

        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            os.chmod(tmp, mode)
            if replace:
                os.replace(tmp, target)  # a rename replaces a link at target; it never follows it
            else:
                os.link(tmp, target)  # fails where anything is at target, a dangling link too
                os.unlink(tmp)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None


def replace_text(path: Path, text: str, *, replace: bool = True) -> None:
    """``write_atomically`` for text the user will read and edit (a spec, a plan)."""
    write_atomically(path, text, replace=replace)
