"""The console: a Textual App that receives its settings and backend.
``make_app`` serves the CLI and the tests alike."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.screen import Screen
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.widgets import Checkbox, Footer, RadioButton

from torchdeck.backends import backend_fields
from torchdeck.backends.errors import BackendError
from torchdeck.settings import Settings

from .glyphs import glyphs_for

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

    from torchdeck.backends.base import Backend
    from torchdeck.backends.eks.cloud import EksCloud
    from torchdeck.backends.spec_options import Where
from .screens.home import HomeScreen


class RunCommands(Provider):
    """ "Monitor RUN" for every run, in the command palette."""

    @property
    def app(self) -> TorchdeckApp:
        app = super().app
        assert isinstance(app, TorchdeckApp)
        return app

    async def startup(self) -> None:
        app = self.app
        try:
            self.runs = await asyncio.to_thread(app.backend.list)
        except BackendError:  # the palette must open even when the backend cannot list
            self.runs = []

    async def discover(self) -> Hits:
        for status in self.runs[:20]:
            yield DiscoveryHit(
                f"Monitor {status.run_id}",
                partial(self.app.open_monitor, status.run_id),
                help=f"{status.state.value}, {status.world_size} ranks",
            )

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for status in self.runs:
            command = f"Monitor {status.run_id}"
            score = matcher.match(command)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(command),
                    partial(self.app.open_monitor, status.run_id),
                    help=f"{status.state.value}, {status.world_size} ranks",
                )


class KeyCommands(Provider):
    """The keys of the screen the palette was opened on, by name ("Create (ctrl+g)"), shown keys
    and hidden ones alike."""

    def _commands(self) -> list[tuple[str, str]]:
        from .screens.help import bindings_of, key_text

        return [(f"{b.description} ({key_text(b.key)})", b.action) for b in bindings_of(type(self.screen))]

    async def discover(self) -> Hits:
        for name, action in self._commands():
            yield DiscoveryHit(name, partial(self.screen.run_action, action), help="a key of this screen")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(name), partial(self.screen.run_action, action), help="a key of this screen"
                )


class AsciiScrollBarRender(ScrollBarRender):
    """Scroll bars without the eighth-block characters."""

    VERTICAL_BARS = ["#"] * 7 + [" "]
    HORIZONTAL_BARS = ["#"] * 7 + [" "]


def use_ascii_widgets(on: bool) -> None:
    """Switch Textual's own glyphs (scroll bars, check boxes) to ASCII, or back."""
    ScrollBar.renderer = AsciiScrollBarRender if on else ScrollBarRender
    for button in (Checkbox, RadioButton):  # Textual's public toggle buttons, each set alike
        button.BUTTON_LEFT, button.BUTTON_RIGHT = ("[", "]") if on else ("▐", "▌")


class TorchdeckApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "torchdeck"
    COMMANDS = App.COMMANDS | {RunCommands, KeyCommands}
    BINDINGS = [Binding("question_mark", "help", "Help", show=False), Binding("ctrl+q", "quit", "Quit", show=False)]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """A notification, its text as written: what it says comes from runs, pods and clusters
        (a failure's log tail, a run's name), and Textual's markup in it would be live (a
        ``[@click=...]``). Every screen's ``notify`` comes here."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    """Under 100 columns (a default SSH terminal has 80) a screen's side panes go behind a key."""

    def __init__(
        self,
        settings: Settings,
        backend: Backend | None = None,
        monitor_run: str | None = None,
        cloud: EksCloud | None = None,
    ):
        super().__init__()
        self.settings = settings
        self._backend = backend
        self._backend_lock = threading.Lock()
        self._cloud = cloud
        self.monitor_run = monitor_run
        self.glyphs = glyphs_for(settings.ascii)
        if settings.ascii:
            self.add_class("-ascii")

    @property
    def backend_name(self) -> str:
        """The backend's name, known without opening it (the settings' choice until it is open)."""
        return self._backend.name if self._backend is not None else self.settings.backend

    @property
    def backend_fields(self) -> Where:
        """The spec fields the backend reads (``Backend.fields``), known without opening it."""
        return self._backend.fields if self._backend is not None else backend_fields(self.settings.backend)

    @property
    def backend(self) -> Backend:
        """The backend given, or else the settings' one, opened where first used: the home screen's
        first listing, in a worker after the first frame is drawn (nothing but the runs list is read
        before it). Where it cannot open (no kubeconfig, a context that is not there), each use
        raises the BackendError that says why, and the console stays open on it."""
        if self._backend is None:
            with self._backend_lock:
                if self._backend is None:
                    from torchdeck.backends import open_backend

                    self._backend = open_backend(self.settings.backend, self.settings)
        return self._backend

    @property
    def cloud(self) -> EksCloud:
        """The door to AWS and EKS for the cloud screens, opened when one first needs it."""
        if self._cloud is None:
            from torchdeck.backends.eks.cloud import EksCloud

            self._cloud = EksCloud(self.settings.state_dir, poll_s=self.settings.aws_poll_s)
        return self._cloud

    def on_mount(self) -> None:
        use_ascii_widgets(self.settings.ascii)
        if self.monitor_run:
            from .screens import monitor  # noqa: F401  (imported before the freeze below)
        # What start-up made (the modules of Textual, Rich and torchdeck: most of the objects the
        # cyclic garbage collector would walk) lives as long as the process: the collector leaves
        # it out from now on. Each full collection walked it all: in the cluster monitor one every
        # 4.3 s held the screen 79 ms (median), and 35 ms with this (benchmarks/kube_monitor.py).
        # No screen exists yet, so none is kept for ever; and only the first app of a process
        # freezes (tests make many).
        if not gc.get_freeze_count():
            gc.freeze()
        self.push_screen(HomeScreen())
        self.call_after_refresh(gc.enable)  # off since start-up (cli/main.py), on once the first frame is drawn
        if self.monitor_run:
            self.open_monitor(self.monitor_run)

    def on_unmount(self) -> None:
        use_ascii_widgets(False)

    def footer(self) -> Footer:
        """The key-binding footer, compact so that a screen's keys fit in 80 columns (without the
        palette hint's separator glyph in ASCII mode)."""
        return Footer(show_command_palette=not self.settings.ascii, compact=True)

    def open_monitor(self, run_id: str) -> None:
        from .screens.monitor import MonitorScreen  # its chart and log search: imported when first opened

        self.push_screen(MonitorScreen(run_id))

    def action_launch(self) -> None:
        from .screens.launch import LaunchScreen

        self.push_screen(LaunchScreen(self.settings.spec_file))

    def action_cluster(self) -> None:
        from .screens.cluster import ClusterScreen

        self.push_screen(ClusterScreen(Path("cluster.yaml")))

    def action_storage(self) -> None:
        from .screens.storage import StorageScreen

        self.push_screen(StorageScreen())

    def action_image(self) -> None:
        from .screens.image import ImageScreen

        self.push_screen(ImageScreen())

    def action_help(self) -> None:
        from .screens.help import HelpScreen  # markdown: imported when first asked for

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield SystemCommand("Launch a job", "Open the launch form", self.action_launch)
        yield SystemCommand("EKS cluster", "Plan, check and create an EKS cluster", self.action_cluster)
        yield SystemCommand("Storage", "EFS or FSx and the model bucket for a cluster", self.action_storage)
        yield SystemCommand("Image", "Build the training image and push it to ECR", self.action_image)
        yield SystemCommand("Runs", "Back to the list of runs", self._home)
        yield SystemCommand("Help", "Keys and screens", self.action_help)
        yield from super().get_system_commands(screen)

    def _home(self) -> None:
        while len(self.screen_stack) > 2:
            self.pop_screen()


def make_app(
    settings: Settings, backend: Backend | None = None, monitor_run: str | None = None, cloud: EksCloud | None = None
) -> TorchdeckApp:
    """The console for ``backend`` (without one, the settings' backend, opened once the first frame
    is drawn) and ``cloud`` (made when a cloud screen first needs it); with ``monitor_run`` it opens
    on that run's monitor."""
    return TorchdeckApp(settings, backend, monitor_run, cloud)
