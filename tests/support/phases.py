"""Where a test run's time went, printed by the run itself: the seconds each test folder took (its
tests' setup, call and teardown, fixtures included; with pytest-xdist, summed over the workers) and
the phases inside it that cost most (the cluster's start, the engine's start, each image build and
load, the cluster's stop).
``scripts/test`` sets ``TORCHDECK_PHASES`` to a file where its own phases (setup, check, the
cluster's build in the background) are written too, one ``NAME<TAB>SECONDS`` line each, and prints
the whole table at its end; without it this plugin prints its part after pytest's summary."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

_folders: dict[str, float] = defaultdict(float)
_inside: dict[str, list[tuple[str, float]]] = defaultdict(list)
_current = {"folder": "tests"}


def folder_of(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time what the block does, as a phase of the folder whose test is running (written at once
    where ``scripts/test`` reads it: in a pytest-xdist worker too)."""
    started = time.monotonic()
    try:
        yield
    finally:
        took = time.monotonic() - started
        where = os.environ.get("TORCHDECK_PHASES")
        if where:
            with open(where, "a", encoding="utf-8") as out:
                out.write(f"  {_current['folder']}: {name}\t{took:.1f}\n")
        else:
            _inside[_current["folder"]].append((name, took))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logstart(nodeid: str) -> None:
    _current["folder"] = folder_of(nodeid)


@pytest.hookimpl
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _folders[folder_of(report.nodeid)] += report.duration


def rows() -> list[tuple[str, float]]:
    """Each folder in the order it ran, the phases inside it indented under it."""
    found: list[tuple[str, float]] = []
    for folder, seconds in _folders.items():
        found.append((folder, seconds))
        found.extend((f"  {name}", took) for name, took in _inside.get(folder, []))
    return found


@pytest.hookimpl
def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller sums every report
        return
    where = os.environ.get("TORCHDECK_PHASES")
    if where:
        with open(where, "a", encoding="utf-8") as out:
            out.writelines(f"{name}\t{seconds:.1f}\n" for name, seconds in rows())
        return
    terminalreporter.section("time per test folder, and the costliest phases inside them")
    for name, seconds in rows():
        terminalreporter.write_line(f"{name:<56} {seconds:8.1f} s")
