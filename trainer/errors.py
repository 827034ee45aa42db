"""The one exception the trainer raises for problems a user can fix."""

from __future__ import annotations


class TrainerError(Exception):
    """A problem with the trainer's input or environment, told in one line
    with a hint; the entry point prints it and exits non-zero."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message
