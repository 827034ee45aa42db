"""Writing a file the user named, whole or not at all, and safely in a folder
others can write to: the temporary file is made exclusively (``O_EXCL``, a
random name, 0600) beside the file it replaces, never at a fixed name that a
planted symlink could redirect. Where the file itself is a symlink
(``~/.kube/config -> dotfiles/kubeconfig``), the file it points to is
replaced and the link stays."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomically(path: Path, data: bytes | str, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` in one rename, so a reader never sees half of it.

    ``mode``: the new file's permissions; None keeps an existing file's, or gives a new one
    what ``open`` would (0666 less the umask). An OSError names ``path``, not the temporary file."""
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    payload = data.encode() if isinstance(data, str) else data
    try:
        if mode is None:
            try:
                mode = target.stat().st_mode & 0o7777
            except FileNotFoundError:
                mode = 0o666 & ~_umask()
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def replace_text(path: Path, text: str) -> None:
    """``write_atomically`` for text the user will read and edit (a spec, a plan)."""
    write_atomically(path, text)
