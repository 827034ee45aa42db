"""The CLI's one line to the person (``say``) and its one question (``ask``, and ``confirm`` on top
of it): what a pod, a node or a cluster wrote in them never drives the terminal, and no pipe hangs
on a question."""

from __future__ import annotations

import io
import sys

import pytest

from torchdeck.backends.errors import BackendError
from torchdeck.cli.output import ask, confirm, say


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_say_writes_one_escaped_line(capsys) -> None:
    say("pod w-0 waiting: \x1b]0;owned\x07ImagePullBackOff\ntorchdeck: forged")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err
    assert err.startswith("torchdeck: pod w-0 waiting: \\x1b]0;owned\\x07ImagePullBackOff\\ntorchdeck: forged")


@pytest.mark.parametrize("typed, agreed", [("y\n", True), ("YES\n", True), ("n\n", False), ("", False)])
def test_confirm_asks_through_the_escaping_and_goes_ahead_only_on_yes(monkeypatch, typed, agreed) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stdin", Tty(typed))
    monkeypatch.setattr(sys, "stderr", err)
    question = "delete cluster demo\x1b[2J"
    if agreed:
        confirm(question, yes=False)
    else:
        with pytest.raises(BackendError, match="cancelled; nothing was changed"):
            confirm(question, yes=False)
    assert "\x1b" not in err.getvalue() and "demo\\x1b[2J [y/N] " in err.getvalue()


def test_without_a_terminal_confirm_refuses_unless_yes_and_ask_answers_no(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    confirm("delete everything?", yes=True)
    with pytest.raises(BackendError, match="needs a confirmation") as caught:
        confirm("delete everything?", yes=False)
    assert "--yes" in caught.value.hint
    assert ask("cordon n1? [y/N] ") is False
    assert "cordon n1? [y/N] no (not a terminal: --yes answers yes)" in capsys.readouterr().err
