"""The errors every backend raises: a one-line message a person can act on
and a hint. The CLI prints them as one line; the console shows them in a
notification. SDK and OS errors are turned into these at the backend edge."""

from __future__ import annotations


class BackendError(Exception):
    """A failure the user can act on: ``message`` says what, ``hint`` how."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class SpecError(BackendError):
    """A job spec that does not validate; ``field`` names the bad field
    (dotted, e.g. ``trainer.epochs``) and ``source`` the file it came from."""

    def __init__(self, field: str, message: str, hint: str = "", source: str = ""):
        if len(message) > 600:  # a value echoed whole could be megabytes
            message = message[:600] + f"... ({len(message) - 600} more characters)"
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{field}: {message}" if field else f"{where}{message}", hint)
        self.field = field
        self.source = source
        self.reason = message  # the message without the field and file it names


class RunIdTaken(BackendError):
    """A run id was free when checked and taken when its first object was made (another console
    submitted in the same second): the submit tries the next one."""


class RunNotFound(BackendError):
    """No run matches the id (or unique prefix) the user gave."""


class FoundByLabel(BackendError):
    """A run found on a cluster by its label alone (no record of making it here): stopping or
    resuming it waits for the user to say it is theirs (``trust_label``)."""


def file_problem(exc: BaseException) -> str:
    """Why a file (a spec, a plan, a kubeconfig, the settings) could not be read, in one line and
    never its text: YAML's errors quote the lines around the problem, a kubeconfig's tokens included."""
    if isinstance(exc, UnicodeDecodeError):
        return "it is not text (UTF-8)"
    mark = getattr(exc, "problem_mark", None)
    why = getattr(exc, "strerror", None) or getattr(exc, "problem", None)
    if why is None:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        why = first if mark is None else "not valid YAML"
    return (f"line {mark.line + 1}: " if mark else "") + str(why)
