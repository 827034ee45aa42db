"""``torchdeck`` and ``torchdeck monitor RUN``: the console, opened with as little read before its
first frame as it needs (the settings and Textual); the backend opens once the frame is drawn (a
backend that cannot open says why on the runs screen), and the headless commands' module, the
spec's and the monitor's are read once a screen wants them."""

from __future__ import annotations

import argparse

from torchdeck.backends.errors import BackendError, SpecError
from torchdeck.settings import Settings, SettingsError

from .output import EXIT_ERROR, EXIT_USAGE, fail


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings (file, environment), with the command line's global options over them."""
    settings = Settings.load()
    if args.backend:
        settings = settings.with_value("backend", args.backend, "--backend")
    if getattr(args, "context", None):
        settings = settings.with_value("kube_context", args.context, "--context")
    if args.ascii:
        settings = settings.with_value("ascii", True, "--ascii")
    return settings


def run_console(args: argparse.Namespace) -> int:
    """Open the console on the settings' backend (on a run's monitor for ``monitor RUN``)."""
    try:
        settings = settings_of(args)
        backend, run_id = None, None
        if args.command == "monitor":
            # a unique prefix becomes the run's id; a bad one is a one-line error before the screen opens
            from torchdeck.backends import open_backend

            backend = open_backend(settings.backend, settings)
            run_id = backend.status(args.run).run_id
        from torchdeck.tui.app import make_app

        app = make_app(settings, backend, monitor_run=run_id)
        app.run()
        return app.return_code or 0
    except (BackendError, SettingsError) as exc:
        return fail(str(exc), EXIT_USAGE if isinstance(exc, SpecError) else EXIT_ERROR)
    except KeyboardInterrupt:
        return 130
