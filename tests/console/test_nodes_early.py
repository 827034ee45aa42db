"""The nodes screen on a big cluster: the nodes drawn as soon as they are read, with ``?`` for what
their pods say and "reading pods..." in the title, then every figure once the pods are read; an
early view that comes after a whole one (a read started later ended first) is not drawn over it."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

from tui_support import FleetSnapshotBackend, screen_lines, settings_for, wait_for

from torchdeck.tui.app import make_app
from torchdeck.tui.screens.board import NodesScreen
from torchdeck.tui.screens.home import HomeScreen


class SlowPodsBackend(FleetSnapshotBackend):
    """Its nodes come at once; their pods only once the test lets them."""

    def __init__(self, state) -> None:
        super().__init__(state)
        self.pods_in = threading.Event()

    def nodes_view(self, early=None):
        whole = super().nodes_view()
        if early is not None:
            bare = [dataclasses.replace(n, pods=0, jobs=()) for n in whole.nodes]
            early(dataclasses.replace(whole, nodes=tuple(bare), pods_read=False))
        assert self.pods_in.wait(30), "the test never let the pods in"
        return whole


def test_the_nodes_come_first_with_their_pods_figures_unknown_then_every_figure(tmp_path, monkeypatch) -> None:
    state = tmp_path / "state"
    state.mkdir()
    backend = SlowPodsBackend(state)

    async def scenario() -> None:
        app = make_app(settings_for(state), backend)
        said: list[str] = []
        notify = app.notify

        def noting(text, **kw):
            said.append(str(text))
            notify(text, **kw)

        monkeypatch.setattr(app, "notify", noting)
        async with app.run_test(size=(140, 30)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
            await pilot.press("m")
            await wait_for(pilot, lambda: isinstance(app.screen, NodesScreen) and "reading pods" in screen_lines(app),
                           what="the nodes alone")  # fmt: skip
            screen = app.screen
            shown = screen_lines(app)
            node = next(line for line in shown.splitlines() if "ip-10-0-1-12" in line)
            assert "?/95" in node and "64/95" not in node and screen.reads == 0, node
            assert "NotReady" in shown  # what the nodes themselves say is there already
            await pilot.press("enter")  # which jobs are on it is not known yet: said so
            await wait_for(pilot, lambda: any("still reading" in text for text in said), what="the enter's answer")
            backend.pods_in.set()
            await wait_for(pilot, lambda: screen.reads == 1, what="the whole view")
            await wait_for(pilot, lambda: "reading pods" not in screen_lines(app), what="the title's words")
            node = next(line for line in screen_lines(app).splitlines() if "ip-10-0-1-12" in line)
            assert "64/95" in node, node
            # an early view that comes late (a read started before this one ends after it) is dropped
            screen.draw_early(dataclasses.replace(screen.view, pods_read=False))
            await pilot.pause()
            assert "reading pods" not in screen_lines(app) and screen.view.pods_read

    asyncio.run(scenario())
