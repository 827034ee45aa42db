"""Programs put on a test's PATH: a folder holding one small script per name, each running a
command of the test's choosing (torchdeck through this interpreter, a stand-in for eksctl)."""

from __future__ import annotations

import shlex
from pathlib import Path


def path_with(folder: Path, programs: dict[str, list[str]]) -> Path:
    """``folder`` made to hold an executable script per name that runs its command with the
    script's own arguments after it; returns the folder, to put first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, command in programs.items():
        script = folder / name
        script.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n')
        script.chmod(0o755)
    return folder
