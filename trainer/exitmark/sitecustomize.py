"""torchdeck's, for one rank of the user's code (the only file in its folder, which the rank's
wrapper puts first on the script's ``PYTHONPATH``, so that it runs before any other): it tells the
wrapper, through the pipe named by ``TORCHDECK_EXIT_FD``, that the script reached the interpreter's
exit, every line of it run and its atexit handlers (the loggers' last writes) done, and the status
it gave ``sys.exit`` if not 0 (a ``raise SystemExit(1)`` of its own goes unseen). Only the rank's
own process says so: a process it forks closes its copy of the pipe and, should it reach the
atexit handler, is not the rank (its pid is checked). A rank that then dies of SIGABRT (PyTorch's
gloo threads as the interpreter tears down) has done its work, whether or not it printed its
steps: ``relay.ExitMark`` and ``tracebacks.FailureWatch``. Where the run names a triage folder, it
starts the hang-triage probe (``triage_probe.py``). Then the environment's own
``sitecustomize``, which this one shadows, is imported as it would have been. Standard library
only."""

from __future__ import annotations

import atexit
import os
import sys


def _chain() -> None:
    """Import the next ``sitecustomize`` on the path, the one this file hides."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_status = [0]
"""The status the script gave ``sys.exit``, where it did: a script that leaves with 1 has not done
its work, though it reached its exit."""


_rank_pid = os.getpid()
"""The rank's own process: only it says that the rank reached its exit. A child it forks (a
helper, a data worker that ends normally) inherits the atexit handler but is not the rank."""


def _told(fd: int) -> None:
    if os.getpid() != _rank_pid:
        return
    try:
        os.write(fd, b"exit" if _status[0] == 0 else b"exit %d" % _status[0])
    except OSError:  # the wrapper is gone: nobody to tell
        pass


def _forked(fd: int) -> None:
    """In a forked child: its copy of the pipe is closed, so no code of the child can write the mark."""
    try:
        os.close(fd)
    except OSError:
        pass


_real_exit = sys.exit


def _exit_noting(status: str | int | None = None) -> None:
    _status[0] = status if isinstance(status, int) else 0 if status is None else 1  # as Python reads it
    _real_exit(status)


# popped: a process the script starts (a spawned DataLoader worker) is not the rank
_fd = os.environ.pop("TORCHDECK_EXIT_FD", "")
if _fd.isdigit():
    atexit.register(_told, int(_fd))  # the first registered runs last, after the script's own
    sys.exit = _exit_noting  # type: ignore[assignment]
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: _forked(int(_fd)))


def _probe() -> None:
    """The hang-triage probe (``triage_probe.py``, beside this folder: in torchdeck's trainer
    package, and in the code bundle beside the relay), where the run asks for one."""
    if not os.environ.get("TORCHDECK_TRIAGE_DIR"):
        return
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "triage_probe.py")
    spec = importlib.util.spec_from_file_location("torchdeck_triage_probe", path)
    if spec is None or spec.loader is None or not os.path.exists(path):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.start()


_probe()
_chain()
