"""The console, driven by Textual's Pilot: the monitor fed by a recorded
run (deterministic), snapshots at 80x24 and 120x40, the home screen, the
launch form's validation, and ASCII mode."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Static
from tui_support import (
    RECORDED_RUN,
    FixedNodesBackend,
    monitor_ready,
    recorded_app,
    recorded_notices,
    recorded_state,
    screen_lines,
    settings_for,
    wait_for,
)

from torchdeck.backends.base import LogLine
from torchdeck.backends.spec import load_spec
from torchdeck.tui.app import make_app
from torchdeck.tui.screens.home import HomeScreen
from torchdeck.tui.screens.launch import LaunchScreen
from torchdeck.tui.screens.monitor import MonitorScreen
from torchdeck.tui.widgets.log_pane import LogPane, LogView
from torchdeck.tui.widgets.rank_table import RankTable


def text_of(widget) -> str:
    return str(widget.render())


def run(coro):
    return asyncio.run(coro)


def test_monitor_shows_the_recorded_run(tmp_path):
    async def scenario():
        app = recorded_app(tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await monitor_ready(pilot)
            status = text_of(screen.query_one("#status-line", Static))
            assert RECORDED_RUN in status and "SUCCEEDED" in status
            assert "epoch 4/4" in status and "step 80/80" in status and "restarts 1" in status
            evals = text_of(screen.query_one("#evals", Static))
            assert "best 60.7% (epoch 4)" in evals and "1:32.5" in evals
            table = screen.query_one("#ranks", RankTable)
            assert table.row_count == 2
            assert [table.get_row_at(i)[0] for i in range(2)] == ["0", "1"]
            assert [table.get_row_at(i)[4] for i in range(2)] == ["done", "done"]
            chart = screen.query_one("#chart")
            assert chart.shown == 2
            nodes = text_of(screen.query_one("#nodes", Static))
            assert "node-0" in nodes and "62%" in nodes and "no GPU" in nodes and "r1" in nodes

    run(scenario())


@pytest.mark.slow
def test_log_pane_filters_by_rank_and_searches(tmp_path):
    async def scenario():
        app = recorded_app(tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await monitor_ready(pilot)
            log = screen.query_one("#log-lines", LogView)
            all_lines = [strip.text for strip in log.lines]
            assert any(line.startswith("r0 ") for line in all_lines) and any(
                line.startswith("r1") for line in all_lines
            )
            await pilot.press("l", "1")
            await wait_for(pilot, lambda: all(s.text.startswith("r1") for s in log.lines), what="rank 1's lines")
            ranked = [strip.text for strip in log.lines]
            assert ranked and all(line.startswith("r1") for line in ranked)
            assert any(line.startswith("r1/1 ") for line in ranked)  # the restarted attempt is marked
            await pilot.press("tab", *"accuracy")  # from the rank box to the search box
            await wait_for(pilot, lambda: all("accuracy" in s.text for s in log.lines), what="the lines found")
            found = [strip.text for strip in log.lines]
            assert len(found) == 5  # four evals and the done line, of rank 1's two attempts' lines
            assert all("accuracy" in line for line in found)
            screen.query_one("#log-rank", Input).value = ""
            await wait_for(pilot, lambda: len(log.lines) > len(found), what="every rank's lines found")
            assert any(s.text.startswith("r0 ") for s in log.lines)

    run(scenario())


def test_monitor_snapshot_80x24(tmp_path, snap_compare):
    app = recorded_app(tmp_path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=monitor_ready)


def test_monitor_snapshot_120x40(tmp_path, snap_compare):
    app = recorded_app(tmp_path)
    assert snap_compare(app, terminal_size=(120, 40), run_before=monitor_ready)


def test_monitor_snapshot_ascii_80x24(tmp_path, snap_compare):
    app = recorded_app(tmp_path, ascii=True)
    assert snap_compare(app, terminal_size=(80, 24), run_before=monitor_ready)


def test_ascii_mode_draws_only_ascii(tmp_path):
    async def scenario():
        app = recorded_app(tmp_path, ascii=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await monitor_ready(pilot)
            screen_text = screen_lines(app)
            assert "loss per rank" in screen_text and "[####" in screen_text
            bad = sorted({c for c in screen_text if ord(c) > 127})
            assert bad == [], f"non-ASCII characters on screen: {bad}"

    run(scenario())


@pytest.mark.slow
def test_c_picks_the_ranks_the_chart_draws_even_after_the_run_ended(tmp_path):
    """The recorded run has ended (its stream too): a choice of ranks reads it again for the chart,
    without adding its log lines twice; a typo is said in the question and loses nothing."""

    async def scenario():
        app = recorded_app(tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await monitor_ready(pilot)
            logs = len(screen.query_one("#logs").buffer)
            chart = screen.query_one("#chart")
            await pilot.press("c")
            await pilot.press("x", "enter")
            error = app.screen.query_one("#pick-error")
            assert "'x' is not a rank" in str(error.render())
            await pilot.press("backspace", "1", "enter")
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor again")
            await wait_for(pilot, lambda: set(screen.snap.curves) == {1}, what="rank 1's curve alone")
            screen.draw_all()
            await wait_for(pilot, lambda: chart.shown == 1, what="the chart of rank 1")
            assert str(chart.border_title) == "loss per rank (1 of 2, picked)"  # fits an 80-column chart
            assert len(screen.query_one("#logs").buffer) == logs

    run(scenario())


def test_the_log_view_grows_without_a_layout_and_keeps_its_scrollbar_right(tmp_path):
    """The log view (LogView) takes lines without laying the screen out again; its scrollbar
    still appears once the lines overflow, spans all of them, and the view follows the end."""

    async def scenario():
        app = recorded_app(tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await monitor_ready(pilot)
            view = screen.query_one("#log-lines")
            await wait_for(pilot, lambda: view.show_vertical_scrollbar, what="the scrollbar")
            assert len(view.lines) > view.size.height
            assert view.vertical_scrollbar.window_virtual_size == len(view.lines)
            assert view.scroll_y == view.max_scroll_y  # the newest line is in sight

    run(scenario())


def test_a_charts_curves_are_freed_as_soon_as_the_next_chart_replaces_them(tmp_path):
    """Textual keeps a finished worker, with its arguments, until the cyclic garbage collector
    frees it. The chart's curves (on a cluster job 6,400 floats, twice a second) must not ride
    along: with the collector off, they are freed once the next chart replaces them."""

    class Points(list):  # a list a weak reference can follow
        pass

    async def scenario():
        app = recorded_app(tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await monitor_ready(pilot)
            chart = screen.query_one("#chart")
            steps = Points(float(s) for s in range(1, 401))
            freed = weakref.ref(steps)
            gc.disable()
            try:
                builds = chart.builds
                chart.show({0: (steps, [1.0 / s for s in steps])}, 1)
                await wait_for(pilot, lambda: chart.builds > builds, what="the chart of those curves")
                del steps
                builds = chart.builds
                chart.show(screen.snap.curves, len(screen.snap.ranks))
                await wait_for(pilot, lambda: chart.builds > builds, what="the next chart")
                assert freed() is None
            finally:
                gc.enable()

    run(scenario())


FREEZE_CHECK = """
import asyncio, gc, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from textual.screen import Screen
from tui_support import RECORDED_RUN, FixedNodesBackend, settings_for, wait_for
from torchdeck.tui.app import make_app
from torchdeck.tui.screens.monitor import MonitorScreen

async def main():
    state = Path(sys.argv[1])
    assert gc.get_freeze_count() == 0
    app = make_app(settings_for(state), FixedNodesBackend(state), RECORDED_RUN)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
        frozen = gc.get_freeze_count()
        seen = [o for o in gc.get_objects() if isinstance(o, Screen)]  # the collector's, not the frozen
        print(frozen, *(type(s).__name__ for s in app.screen_stack if not any(s is o for o in seen)))

asyncio.run(main())
"""


def test_start_ups_objects_are_frozen_out_of_the_collector_but_no_screen(tmp_path):
    """The app freezes what start-up made (gc.freeze) so that full collections walk less; it does
    so before any screen exists, so a screen, once closed, can still be collected. In a process
    of its own: the first app of a process freezes, and pytest's has made many."""
    state = recorded_state(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", FREEZE_CHECK, str(state), str(Path(__file__).parent.parent / "support")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    frozen, *screens_frozen = out.stdout.split()
    assert int(frozen) > 10_000  # Textual's, Rich's and torchdeck's modules
    # Only Textual's default screen, made with the app (under home and the monitor), lives as long
    assert screens_frozen == ["Screen"]


FIRST_FRAME_CHECK = """
import asyncio, json, sys
from pathlib import Path
from torchdeck.settings import Settings
from torchdeck.tui.app import make_app
from torchdeck.tui.screens.home import HomeScreen

loaded = {}
mounted = HomeScreen.on_mount

def on_mount(self):  # composed, about to draw its first frame
    mounted(self)
    loaded["before the first frame"] = sorted(sys.modules)

HomeScreen.on_mount = on_mount

async def main():
    state = Path(sys.argv[1])
    app = make_app(Settings(state_dir=state, spec_file=state / "torchdeck.yaml"))  # no backend given
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(1200):  # up to a minute, on a loaded host
            if isinstance(app.screen, HomeScreen) and app.screen.statuses:
                break
            await pilot.pause(0.05)
        table = app.screen.table
        title = str(app.screen.query_one("#title").render())
        print(json.dumps({**loaded, "rows": table.row_count, "focused": app.focused is table, "title": title}))

asyncio.run(main())
"""


def test_the_first_frame_is_drawn_before_the_backend_opens_and_the_runs_arrive_after_it(tmp_path):
    """Issue 43: nothing but the settings is read before the console's first frame. The backend is
    opened (its modules loaded) by the first listing, which starts once the frame is drawn; the
    ledger, the runs table's widget and the monitor's state come later still. In a process of its
    own, so that what is loaded is what the console loaded."""
    state = recorded_state(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", FIRST_FRAME_CHECK, str(state)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    early = set(seen["before the first frame"])
    for later in (
        "torchdeck.backends.local",
        "torchdeck.backends.base",
        "torchdeck.backends.ledger",
        "torchdeck.monitor.state",
        "textual.widgets._data_table",
    ):
        assert later not in early, later
    assert "runs on the local backend" in seen["title"]
    assert seen["rows"] == 1 and seen["focused"]  # the recorded run, in a table that has the keys


def test_a_backend_that_cannot_open_is_said_on_the_runs_screen_and_the_console_stays_open(tmp_path):
    """The EKS backend with no cluster connected used to stop the console before its first frame;
    now the runs screen says why (once as a notice, and where the run's detail goes) and every
    other screen still opens: the cluster wizard is how such a user gets a cluster."""

    async def scenario():
        app = make_app(settings_for(tmp_path / "state", backend="eks"))
        notices = recorded_notices(app)
        async with app.run_test(size=(100, 30)) as pilot:
            home = app.screen
            assert isinstance(home, HomeScreen)
            await wait_for(pilot, lambda: "cannot list runs" in text_of(home.query_one("#detail")), what="the error")
            detail = text_of(home.query_one("#detail"))
            assert "which EKS cluster?" in detail and "cluster connect" in detail  # the reason and its hint
            assert "runs on the eks backend" in text_of(home.query_one("#title"))
            await pilot.press("r")  # tried again: the same failure, not notified twice
            await app.workers.wait_for_complete()  # the listing, failed again
            await pilot.pause()  # and its failure handled
            assert "cannot list runs" in text_of(home.query_one("#detail"))
            assert sum("which EKS cluster?" in n for n in notices) == 1
            await pilot.press("question_mark")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen", what="the help screen")

    run(scenario())


def test_home_lists_runs_and_opens_the_monitor(tmp_path):
    async def scenario():
        app = recorded_app(tmp_path, monitor=False)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.statuses, what="runs")
            table = app.screen.query_one("#runs", DataTable)
            row = table.get_row_at(0)
            assert row[0] == RECORDED_RUN and str(row[1]) == "succeeded" and row[3] == "4/4"
            detail = text_of(app.screen.query_one("#detail", Static))
            assert "restarts 1" in detail and RECORDED_RUN in detail
            await pilot.press("enter")
            screen = await monitor_ready(pilot)
            assert screen.run_id == RECORDED_RUN
            await pilot.press("escape")
            assert isinstance(app.screen, HomeScreen)
            await pilot.press("question_mark")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "HelpScreen", what="the help screen")

    run(scenario())


@pytest.mark.slow
def test_the_runs_table_redraws_only_what_changed_and_puts_a_new_run_on_top(tmp_path, monkeypatch):
    """A refresh with the same runs changes only their changed cells (a run that ends shows it);
    a new run is drawn on top. The runs are made as the local backend leaves them."""
    import json
    import time

    from torchdeck.backends import local
    from torchdeck.backends.local import LocalBackend

    state = tmp_path / "state"
    # live-1 has no pid.json: pending while its launcher may still be starting, however long the console takes
    monkeypatch.setattr(local, "LAUNCHER_START_S", 3600.0)

    def make(run_id: str, at: float, ended: bool) -> None:
        run = state / "runs" / run_id
        (run / "metrics").mkdir(parents=True)
        launch = {"run_id": run_id, "name": "t", "cmd": [], "env": {}, "cwd": ".", "port": 0}
        (run / "launch.json").write_text(json.dumps({**launch, "submitted_at": at, "world_size": 2}))
        if ended:
            (run / "exit.json").write_text(json.dumps({"exit_code": 0, "finished_at": at + 1}))

    now = time.time()
    make("old-1", now - 600, ended=True)
    make("live-1", now - 1, ended=False)  # just submitted: its launcher is starting

    async def scenario():
        app = make_app(settings_for(state), LocalBackend(state))
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.statuses, what="runs")
            table = app.screen.query_one("#runs", DataTable)
            assert [table.get_row_at(i)[0] for i in range(2)] == ["live-1", "old-1"]
            assert str(table.get_row_at(0)[1]) == "pending"
            rows = table.row_count
            (state / "runs" / "live-1" / "exit.json").write_text(json.dumps({"exit_code": 0, "finished_at": now}))
            await wait_for(pilot, lambda: str(table.get_row_at(0)[1]) == "succeeded", what="the state cell")
            assert table.row_count == rows
            make("new-1", time.time(), ended=True)
            await wait_for(pilot, lambda: table.row_count == 3, what="the new run")
            assert [table.get_row_at(i)[0] for i in range(3)] == ["new-1", "live-1", "old-1"]

    run(scenario())


async def open_launch_form(pilot, app) -> LaunchScreen:
    await pilot.press("n")
    await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the form")
    assert isinstance(app.screen, LaunchScreen)
    return app.screen


def test_launch_form_names_the_bad_field_and_starts_nothing(tmp_path):
    async def scenario():
        app = recorded_app(tmp_path, monitor=False)
        async with app.run_test(size=(100, 40)) as pilot:
            form = await open_launch_form(pilot, app)
            form.query_one("#f-name", Input).value = "Bad Name"
            await pilot.press("ctrl+l")
            await wait_for(pilot, lambda: text_of(form.query_one("#e-name", Static)), what="the field's error")
            assert text_of(form.query_one("#e-name", Static)).startswith("must be 1-40 lower-case letters")
            assert text_of(form.query_one("#form-error", Static)) == ""
            assert app.focused is form.query_one("#f-name")
            assert isinstance(app.screen, LaunchScreen)
            assert len(list((tmp_path / "state" / "runs").iterdir())) == 1  # only the recorded run
            # a good form saves to the spec file, which the CLI reads back
            form.query_one("#f-name", Input).value = "saved-job"
            form.query_one("#f-trainer-epochs", Input).value = "3"
            await pilot.press("ctrl+s")
            spec_file = tmp_path / "state" / "torchdeck.yaml"
            await wait_for(pilot, lambda: "saved-job" in spec_file.read_text(), what="the spec saved")
            assert "name: saved-job" in spec_file.read_text() and "epochs: 3" in spec_file.read_text()

    run(scenario())


def test_launch_form_takes_your_script_its_arguments_and_a_metrics_pattern(tmp_path, monkeypatch):
    code = tmp_path / "project"
    code.mkdir()
    (code / "train.py").write_text("print('loss: 1')\n")
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)  # the user's environment: this one, which has torch

    async def scenario():
        app = recorded_app(tmp_path, monitor=False)
        async with app.run_test(size=(100, 40)) as pilot:
            form = await open_launch_form(pilot, app)
            form.query_one("#f-name", Input).value = "mine"
            form.query_one("#f-entrypoint-script", Input).value = "nothere.py"
            form.query_one("#f-entrypoint-args", Input).value = "--lr 0.1 --note 'two words'"
            form.query_one("#f-entrypoint-code", Input).value = str(code)
            form.query_one("#f-metrics-pattern", Input).value = "L=(?P<los>[0-9.]+)"
            await pilot.press("ctrl+l")
            await wait_for(pilot, lambda: text_of(form.query_one("#e-metrics-pattern", Static)), what="the error")
            assert text_of(form.query_one("#e-metrics-pattern", Static)).startswith(
                "has groups torchdeck does not know: los"
            )
            assert app.focused is form.query_one("#f-metrics-pattern")
            form.query_one("#f-metrics-pattern", Input).value = "L=(?P<loss>[0-9.]+)"
            await pilot.press("ctrl+l")  # the script is not there: one line, nothing starts
            await wait_for(pilot, lambda: "nothere.py" in text_of(form.query_one("#form-error", Static)), what="error")
            assert len(list((tmp_path / "state" / "runs").iterdir())) == 1
            form.query_one("#f-entrypoint-script", Input).value = "train.py"
            await pilot.press("ctrl+s")
            spec_file = tmp_path / "state" / "torchdeck.yaml"
            await wait_for(pilot, lambda: spec_file.exists() and "train.py" in spec_file.read_text(), what="saved")
            saved = load_spec(spec_file)
            assert (saved.entrypoint.script, saved.entrypoint.code) == ("train.py", str(code))
            assert saved.entrypoint.args == ["--lr", "0.1", "--note", "two words"]
            assert saved.metrics.pattern == "L=(?P<loss>[0-9.]+)"

    run(scenario())


@pytest.mark.parametrize("bad", ["nope", "recorded-9"])
def test_monitor_of_unknown_run_is_a_notification_not_a_crash(tmp_path, bad):
    async def scenario():
        state = recorded_state(tmp_path)
        app = make_app(settings_for(state), FixedNodesBackend(state), bad)
        said = recorded_notices(app)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: any("no run" in message for message in said), what="a notice")
            assert app.is_running

    run(scenario())


def test_a_ranks_escape_sequences_and_control_characters_never_reach_the_terminal(tmp_path):
    """A rank's output is drawn as text: colours from a logger, a progress bar's carriage returns,
    a title-setting or screen-clearing sequence and stray control bytes are taken out (they would
    otherwise be written to the user's terminal as they are); the words stay and are searched."""

    async def scenario():
        app = recorded_app(tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await monitor_ready(pilot)
            pane = screen.query_one(LogPane)
            pane.add_lines(
                [
                    LogLine(0, "\x1b]0;owned\x07\x1b[2J\x1b[31mERROR\x1b[0m disk full\x00\x08"),
                    LogLine(1, " 10%|#    | 1/10\r 50%|#####| 5/10\r100%|#########| 10/10\tdone\x1bc"),
                ]
            )
            pane.flush()
            await wait_for(pilot, lambda: "ERROR disk full" in screen_lines(app), what="the lines drawn")
            shown = [strip.text for strip in screen.query_one(LogView).lines][-2:]
            assert shown == ["r0 ERROR disk full", "r1 100%|#########| 10/10    done"]
            drawn = screen_lines(app)
            assert "ERROR disk full" in drawn and "owned" not in drawn
            assert not [c for c in drawn if ord(c) < 32 and c != "\n" or 0x7F <= ord(c) < 0xA0]
            pane.search = "disk"
            pane.refilter()
            (found,) = [strip for strip in screen.query_one(LogView).lines]
            assert [seg.text for seg in found if seg.style and seg.style.reverse] == ["disk"]

    run(scenario())


def test_a_runs_own_escape_sequences_never_reach_the_consoles_terminal(tmp_path):
    """Issue 29 row 6, the console's door: a failure reason and hint holding a title sequence, a
    screen clear and a carriage return blanked the runs screen in a real terminal. Every message
    a worker brings (runs, a status, a cloud step's event) passes terminal.as_shown as it is made."""
    import json
    import time as clock

    from torchdeck.backends.base import JobState, JobStatus
    from torchdeck.backends.local import LocalBackend
    from torchdeck.tui.messages import RunsListed, StatusChanged, StepProgressed

    hostile = "\x1b]0;pwned\x07\x1b[2J\rboom\x9b31m"
    run_dir = tmp_path / "state" / "runs" / "evil-1124-000000"
    run_dir.mkdir(parents=True)
    (run_dir / "launch.json").write_text(json.dumps({"command": ["x"], "port": 1, "submitted_at": clock.time()}))
    (run_dir / "status.json").write_text(json.dumps({"run_id": run_dir.name, "name": "evil", "backend": "local",
                                                 "state": "failed", "world_size": 1, "submitted_at": clock.time(),
                                                 "reason": f"RuntimeError: {hostile}", "hint": hostile}))  # fmt: skip

    async def scenario():
        app = make_app(settings_for(tmp_path / "state"), LocalBackend(tmp_path / "state"))
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.statuses, what="runs")
            await wait_for(pilot, lambda: "boom" in screen_lines(app), what="the run's reason drawn")
            shown = screen_lines(app)
            assert "boom" in shown and "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown

    run(scenario())
    status = JobStatus("r", "r", "local", JobState.FAILED, 1, 0.0, reason=hostile, hint=hostile)
    for message in (RunsListed([status]), StatusChanged(status)):
        texts = [s.reason + s.hint for s in getattr(message, "statuses", [getattr(message, "status", None)])]
        assert all("\x1b" not in t and "boom" in t for t in texts)
    from torchdeck.backends.eks.progress import Progress

    step = StepProgressed(Progress("build", f"docker says {hostile}", 1.0, "output"), "image")
    assert (
        "\x1b" not in step.progress.message and "\x9b" not in step.progress.message and "boom" in step.progress.message
    )


def test_the_runs_screen_shows_every_run_beside_one_whose_folder_cannot_be_read(tmp_path):
    """Issue 40 rows 1 and 2, the console's door: a run whose launch.json is a FIFO kept the runs screen
    on "reading runs..." for ever, and one whose launch.json is ``[1]`` made it say only "runs failed
    AttributeError". Each is now a row saying why, and the other runs show beside it."""
    import json
    import os
    import time as clock

    from torchdeck.backends.local import LocalBackend

    runs = tmp_path / "state" / "runs"
    for run_id, launch in (("fifo-1125-000000", None), ("list-1125-000001", [1]), ("fine-1125-000002", {})):
        (runs / run_id).mkdir(parents=True)
        if launch is None:
            os.mkfifo(runs / run_id / "launch.json")
        else:
            (runs / run_id / "launch.json").write_text(json.dumps(launch))
    (runs / "fine-1125-000002" / "status.json").write_text(json.dumps({
        "run_id": "fine-1125-000002", "name": "fine", "backend": "local", "state": "succeeded", "world_size": 2,
        "submitted_at": clock.time()}))  # fmt: skip

    async def scenario():
        app = make_app(settings_for(tmp_path / "state"), LocalBackend(tmp_path / "state"))
        async with app.run_test(size=(120, 30)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.statuses, what="runs")
            table = app.screen.query_one("#runs", DataTable)
            await wait_for(pilot, lambda: table.row_count == 3, what="three rows")
            rows = {str(table.get_row_at(i)[0]): table.get_row_at(i) for i in range(table.row_count)}
            assert set(rows) == {"fifo-1125-000000", "list-1125-000001", "fine-1125-000002"}
            assert str(rows["fine-1125-000002"][1]) == "succeeded"
            said = []
            detail = app.screen.query_one("#detail", Static)
            for row in range(table.row_count):  # each row's detail says what it is, or why it cannot be read
                if row:
                    await pilot.press("down")
                run_id = str(table.get_row_at(row)[0])
                await wait_for(pilot, lambda run_id=run_id: run_id in text_of(detail), what=f"{run_id}'s detail")
                said.append(text_of(detail))
            assert any("launch.json" in d and "FIFO" in d for d in said), said
            assert any("launch.json" in d and "not a run record" in d for d in said), said

    run(scenario())
