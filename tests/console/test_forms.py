"""The one form style and the fit at 80 columns, driven with Textual's Pilot: errors under a
field only once it was touched or a submit was tried, an example in every empty input, the
launch form whole at 80x24, side panes behind f2 at 80 columns and beside the form at 120, no
table cut, every footer whole at 80 columns, every key in the help and in the command palette."""

from __future__ import annotations

import asyncio

import pytest
from textual.command import Command, CommandList, CommandPalette
from textual.widgets import DataTable, Footer, Input
from tui_support import SnapshotBackend, fixed_context_cloud, recorded_state, screen_lines, settings_for, wait_for

from torchdeck.backends import backend_fields
from torchdeck.backends.spec import spec_options
from torchdeck.tui.app import make_app
from torchdeck.tui.screens.cluster import ClusterScreen
from torchdeck.tui.screens.form import FormScreen
from torchdeck.tui.screens.help import SCREENS, help_text, key_text, screen_bindings
from torchdeck.tui.screens.home import HomeScreen
from torchdeck.tui.screens.image import ImageScreen
from torchdeck.tui.screens.launch import LaunchScreen, form_options
from torchdeck.tui.screens.monitor import MonitorScreen
from torchdeck.tui.screens.storage import StorageScreen
from torchdeck.tui.widgets.key_line import KeyLine

pytestmark = pytest.mark.slow  # the fast lane (./scripts/test --fast) leaves these out

FORMS = {"n": LaunchScreen, "c": ClusterScreen, "v": StorageScreen, "i": ImageScreen}


def console(tmp_path, monkeypatch, recorded: bool = False):
    monkeypatch.chdir(tmp_path)
    state = recorded_state(tmp_path) if recorded else tmp_path / "state"
    state.mkdir(exist_ok=True)
    return make_app(settings_for(state), SnapshotBackend(state), cloud=fixed_context_cloud(state))


async def open_screen(pilot, key: str, screen_type: type):
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, HomeScreen), what="the runs")
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, screen_type), what=screen_type.__name__)
    await pilot.pause(0.2)
    return pilot.app.screen


def shown_error(screen, field: str) -> str:
    line = screen.query_one(f"#e-{field}")
    return str(line.render()) if line.display else ""


def test_an_error_shows_under_its_field_once_the_field_is_left_or_a_submit_is_tried(tmp_path, monkeypatch):
    async def scenario():
        app = console(tmp_path, monkeypatch)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_screen(pilot, "c", ClusterScreen)
            assert screen.errors.get("name", "").startswith("must not be empty")  # known, not yet shown
            assert shown_error(screen, "name") == "" and app.focused is screen.query_one("#f-name")
            await pilot.press("tab")  # left empty: now it is said
            assert shown_error(screen, "name").startswith("must not be empty")
            assert app.focused is screen.query_one("#f-region")
            screen.set_value("name", "demo")
            screen.set_value("workers", "bad")  # set by the form, not typed: the field is not touched
            await pilot.pause()
            assert "workers" in screen.errors and shown_error(screen, "workers") == ""

        app = console(tmp_path, monkeypatch)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_screen(pilot, "v", StorageScreen)
            assert shown_error(screen, "cluster") == ""
            await pilot.press("ctrl+g")  # create, with no cluster named: every error shows
            await pilot.pause()
            assert shown_error(screen, "cluster").startswith("which cluster?")
            assert isinstance(app.screen, StorageScreen)  # nothing was asked, nothing started

    asyncio.run(scenario())


def test_every_empty_input_shows_an_example_and_the_focused_field_says_what_it_wants(tmp_path, monkeypatch):
    async def scenario():
        app = console(tmp_path, monkeypatch)
        async with app.run_test(size=(80, 24)) as pilot:
            for key, screen_type in FORMS.items():
                screen = await open_screen(pilot, key, screen_type)
                assert isinstance(screen, FormScreen)
                inputs = list(screen.query(".form Input").results(Input))
                assert inputs and all(i.placeholder for i in inputs), screen_type.__name__
                assert all(i.compact for i in inputs)
                focused = app.focused
                field = next(f for f in screen.fields if focused is not None and focused.id == f"f-{f.id}")
                assert str(screen.query_one("#field-help").render()) == (field.help or field.label)
                await pilot.press("escape")

    asyncio.run(scenario())


def test_at_80x24_every_field_of_the_launch_form_comes_into_sight_as_it_takes_focus(tmp_path, monkeypatch):
    async def scenario():
        app = console(tmp_path, monkeypatch)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_screen(pilot, "n", LaunchScreen)
            form = screen.query_one("#form")
            rows = list(screen.query(".field"))
            assert len(rows) == len(screen.fields) == len(form_options(backend_fields("local")))
            seen = set()
            for _ in range(len(rows)):
                focused = app.focused
                assert focused is not None and focused.id and focused.id.startswith("f-")
                seen.add(focused.id)
                row = screen.query_one(f"#row-{focused.id[2:]}")
                assert form.region.y <= row.region.y and row.region.bottom <= form.region.bottom, focused.id
                await pilot.press("tab")
                await pilot.pause()
            assert seen == {f"f-{f.id}" for f in screen.fields}
            assert screen.query_one("#buttons").region.bottom <= 24 - 1  # above the footer

    asyncio.run(scenario())


def test_the_form_holds_each_field_that_applies_to_the_backend_and_no_other() -> None:
    local = {o.path for o in form_options(backend_fields("local"))}
    cluster = {o.path for o in form_options(backend_fields("kubernetes"))}
    assert {"image", "namespace", "cluster.kind", "cluster.queue", "nodes", "resources.gpus", "cluster.pvc"} <= cluster
    assert not {"image", "namespace", "cluster.kind", "cluster.queue", "nodes"} & local
    assert {"local_image", "data_dir", "entrypoint.python"} & local == {"local_image", "data_dir"}
    assert {"entrypoint.code", "entrypoint.script", "trainer.epochs", "name"} <= local & cluster
    assert form_options(backend_fields("eks")) == form_options(backend_fields("kubernetes"))
    # a label is what puts a field on the form: every option with one is on a backend's form
    assert {o.path for o in spec_options() if o.option.label} == local | cluster


@pytest.mark.parametrize("key", ["c", "v", "i"])
def test_side_panes_go_behind_f2_at_80_columns_and_sit_beside_the_form_at_120(tmp_path, monkeypatch, key):
    async def scenario():
        app = console(tmp_path, monkeypatch)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_screen(pilot, key, FORMS[key])
            side, form = screen.query_one("#cloud-side"), screen.query_one("#cloud-left")
            assert not side.display and form.region.width == 80
            assert "f2:" in str(screen.query_one("#cloud-title").render())
            await pilot.press("f2")
            await pilot.pause()
            assert side.display and not form.display and side.region.width == 80
            if key == "c":  # the catalogue is whole: no type cut, no sideways scrolling
                table = screen.query_one("#catalogue", DataTable)
                assert table.virtual_size.width <= table.scrollable_content_region.width
            await pilot.press("f2")
            await pilot.pause()
            assert form.display and not side.display
        app = console(tmp_path, monkeypatch)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await open_screen(pilot, key, FORMS[key])
            side, form = screen.query_one("#cloud-side"), screen.query_one("#cloud-left")
            assert side.display and form.display and side.region.x >= form.region.right
            assert "f2" not in str(screen.query_one("#cloud-title").render())
            if key == "c":
                table = screen.query_one("#catalogue", DataTable)
                assert table.virtual_size.width <= table.scrollable_content_region.width

    asyncio.run(scenario())


def test_every_footer_shows_all_its_keys_whole_at_80_columns(tmp_path, monkeypatch):
    async def check(pilot, screen) -> None:
        shown = [b for b in pilot.app.screen.active_bindings.values() if b.binding.show and b.enabled]
        await wait_for(pilot, lambda: shown[0].binding.description in screen_lines(pilot.app), what="the footer")
        footer = screen_lines(pilot.app).splitlines()[-1]
        for active in shown:
            assert active.binding.description in footer, (type(screen).__name__, active.binding.description, footer)
        # one footer: Textual's, or on the runs screen its one-widget line of the same bindings
        assert len(pilot.app.screen.query(Footer)) + len(pilot.app.screen.query(KeyLine)) == 1

    async def scenario():
        app = console(tmp_path, monkeypatch, recorded=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.statuses, what="runs")
            await check(pilot, app.screen)
            for key, screen_type in FORMS.items():
                await check(pilot, await open_screen(pilot, key, screen_type))
                await pilot.press("escape")
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
            await check(pilot, app.screen)

    asyncio.run(scenario())


def test_every_screen_with_keys_is_in_the_help_with_each_of_its_keys():
    import importlib
    import inspect
    import pkgutil

    from textual.screen import ModalScreen

    import torchdeck.tui.screens as screens

    listed = {module for _, module, _ in SCREENS}
    text = help_text()
    for info in pkgutil.iter_modules(screens.__path__):
        module = importlib.import_module(f"torchdeck.tui.screens.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or not issubclass(cls, FormScreen | HomeScreen | MonitorScreen):
                continue
            if issubclass(cls, ModalScreen) or not cls.__dict__.get("BINDINGS"):
                continue
            assert info.name in listed, f"{cls.__name__} is not in the help"
    for screen_name, screen_module, _ in SCREENS:
        for binding in screen_bindings(screen_module):
            assert f"`{key_text(binding.key)}` {binding.description}" in text, (screen_name, binding.key)


def test_the_command_palette_runs_a_screens_key_by_its_name(tmp_path, monkeypatch):
    async def scenario():
        app = console(tmp_path, monkeypatch)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await open_screen(pilot, "c", ClusterScreen)
            for field, value in (("name", "demo"), ("bucket", "torchdeck-models")):
                screen.set_value(field, value)
            await pilot.pause()
            await pilot.press("ctrl+p")
            await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), what="the command palette")
            await pilot.press(*"Save (ctrl+s)")
            hits = app.screen.query_one(CommandList)

            def save_is_highlighted() -> bool:  # enter picks the highlighted hit; with none it only highlights
                hit = hits.highlighted_option
                return isinstance(hit, Command) and "Save (ctrl+s)" in str(hit.hit.text)

            await wait_for(pilot, save_is_highlighted, what="the save key highlighted in the palette")
            await pilot.press("enter")
            await wait_for(pilot, lambda: (tmp_path / "cluster.yaml").exists(), what="the plan saved by the palette")
            assert "name: demo" in (tmp_path / "cluster.yaml").read_text()

    asyncio.run(scenario())
