"""The one way torchdeck opens a file that someone else wrote, to read it: regular files only.

A run's folder is written by the user's script, by its ranks and, under ``train --in-image``, by
whatever the image runs; a logger's folder by the user's code. Any of them can leave a FIFO (an
``open`` that never returns), a link to ``/dev/zero`` (a read that never ends) or a socket where a
file was expected. ``open_regular`` opens without blocking, checks what it opened (``fstat``, so a
file swapped after a check is still caught) and only then hands back a file to read; anything else
is a ``NotRegularFile`` (an ``OSError``: every reader already takes that as "not readable now").

Standard library only: the local rank wrapper and the pods' relay use it beside the user's code,
and ``backends/files.py`` builds its gate on it."""

from __future__ import annotations

import os
import stat
from typing import BinaryIO


class NotRegularFile(OSError):
    """What was at the path is not a regular file (a FIFO, a device, a socket, a folder): ``kind``."""

    def __init__(self, path: str, kind: str):
        super().__init__(f"{path} is {kind}, not a file torchdeck reads")
        self.kind = kind


def kind_of(mode: int) -> str:
    """What a file of this mode is, in words: 'a FIFO (named pipe)', 'a device', ..."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened to read, in binary, where it is a regular file (links followed); else
    ``NotRegularFile`` naming what it is. FileNotFoundError and other OSErrors pass through."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(os.fspath(path), kind_of(mode))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_at_most(path: str | os.PathLike[str], max_bytes: int, offset: int = 0) -> bytes:
    """At most ``max_bytes`` of a regular file from ``offset``: never more, whatever the file holds."""
    with open_regular(path) as f:
        if offset:
            f.seek(offset)
        return f.read(max_bytes)
