"""Writing a file the user named, whole or not at all."""

from __future__ import annotations

from pathlib import Path


def replace_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it, so a reader never sees half of
    it. An OSError names ``path`` (the file the user gave), not the temporary file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
