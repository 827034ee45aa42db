"""The console end to end: a real 2-rank job launched with key presses,
watched live, then reattached by a new console after the first one exits;
and the real `torchdeck` command in a real terminal (tmux) at 80x24."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest
from local_runs import cli_env, finished, left_running, run_processes
from textual.widgets import Input
from trainer_runs import REPO
from tui_support import wait_for

from torchdeck.backends.local import LocalBackend
from torchdeck.settings import Settings
from torchdeck.tui.app import make_app
from torchdeck.tui.screens.launch import LaunchScreen
from torchdeck.tui.screens.monitor import MonitorScreen

pytestmark = pytest.mark.slow


def both_ranks_have_loss(screen: MonitorScreen) -> bool:
    snap = screen.snap
    return len(snap.ranks) == 2 and all(r.loss is not None for r in snap.ranks)


def test_launch_from_the_console_watch_and_reattach(tmp_path, cifar_dir):
    state = tmp_path / "state"
    settings = Settings(state_dir=state, spec_file=tmp_path / "torchdeck.yaml", refresh_hz=10)
    seen: dict = {}

    async def launch_and_watch():
        app = make_app(settings, LocalBackend(state))
        async with app.run_test(size=(100, 40)) as pilot:
            await pilot.press("n")
            await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch form")
            form = app.screen
            # type into the form as a user would
            for field, value in (
                ("#f-trainer-epochs", "2"),
                ("#f-trainer-max-steps", "30"),
                ("#f-data-dir", str(cifar_dir)),
            ):
                form.query_one(field, Input).value = ""
                form.query_one(field, Input).focus()
                await pilot.press(*value)
            await pilot.press("ctrl+l")
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor", timeout=300)
            screen = app.screen
            assert isinstance(screen, MonitorScreen)
            await wait_for(pilot, lambda: both_ranks_have_loss(screen), what="loss from both ranks", timeout=300)
            seen["run_id"] = screen.run_id
            seen["events_live"] = screen.snap.events
            table = screen.query_one("#ranks")
            await wait_for(pilot, lambda: table.row_count == 2, what="two rank rows")
        # leaving the console does not stop the job
        assert run_processes(seen["run_id"]), "the job ended with the console"

    asyncio.run(launch_and_watch())
    status = finished(LocalBackend(state), seen["run_id"])
    assert status.state.value == "succeeded" and status.step == 30

    async def reattach():
        app = make_app(settings, LocalBackend(state), seen["run_id"])
        async with app.run_test(size=(100, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
            screen = app.screen
            await wait_for(
                pilot,
                lambda: screen.status is not None and screen.status.state.is_terminal and screen.snap.done is not None,
                what="the finished run",
                timeout=20,
            )
            snap = screen.snap
            assert snap.step == 30 and len(snap.evals) == 2 and snap.events > seen["events_live"]
            assert all(r.flag == "done" for r in snap.ranks)

    asyncio.run(reattach())


def test_real_terminal_80x24_over_tmux(tmp_path, cifar_dir):
    """`torchdeck` as a user starts it, in a real terminal: home screen,
    the help screen, then `torchdeck monitor` on a running job, in ASCII.
    tmux is part of the test machine; without it this test fails, not skips."""
    state = tmp_path / "state"
    env = cli_env(state)
    session = f"torchdeck-test-{time.monotonic_ns()}"
    tmux = ["tmux", "-L", session]

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout

    def wait_screen(text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = screen()
            if text in shown:
                return shown
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared; screen was:\n{screen()}")

    exports = " ".join(f"{k}={v!r}" for k, v in env.items() if k.startswith(("TORCHDECK_", "PATH", "HOME", "OMP")))

    def console(*args: str) -> None:
        """``torchdeck ARGS`` in a new tmux session of 80x24."""
        command = f"cd {REPO} && env {exports} {sys.executable} -m torchdeck {' '.join(args)}"
        subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command], check=True)

    try:
        console()
        home = wait_screen("runs on the local backend")
        assert "n New " in home  # the keys come with the first frame, the runs after it
        wait_screen("No runs yet")
        subprocess.run([*tmux, "send-keys", "-t", session, "?"], check=True)
        wait_screen("Keys: n New")  # the help screen, its first screen's keys
        subprocess.run([*tmux, "send-keys", "-t", session, "q"], check=True)
        subprocess.run([*tmux, "send-keys", "-t", session, "q"], check=True)
        time.sleep(1)

        run_id = subprocess.run(
            [sys.executable, "-m", "torchdeck", "train", "--detach", "--data-dir", str(cifar_dir), "--epochs", "30"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            check=True,
        ).stdout.strip()
        subprocess.run([*tmux, "kill-server"], check=False)
        console("--ascii", "monitor", run_id[:8])
        shown = wait_screen("RUNNING", timeout=300)
        shown = wait_screen(" r1 ", timeout=30)
        assert run_id in shown and "loss per rank" in shown  # the prefix was resolved to the whole id
        assert all(ord(c) < 128 for c in shown), "non-ASCII on an --ascii screen"
        subprocess.run([*tmux, "send-keys", "-t", session, "s"], check=True)
        wait_screen("Stop ")
        subprocess.run([*tmux, "send-keys", "-t", session, "y"], check=True)
        wait_screen("CANCELLED", timeout=30)
        assert left_running(run_id) == []
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)
        for proc in run_processes(locals().get("run_id", "-")):
            proc.kill()
