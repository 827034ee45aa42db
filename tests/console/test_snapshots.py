"""Every screen and modal as a person sees it, at 80x24 (a default SSH terminal) and at 120x40,
and at 80x24 in ASCII mode: Textual's own snapshot tests (the pictures are in __snapshots__;
each was looked at before it was committed; `pytest --snapshot-update` redraws them). The
monitor's pictures (80x24, 120x40, ASCII) are in test_console.py.

What would differ between runs is pinned: the runs screen's clock (a run's age), the build
context of the image screen (its tags hash this repository), the model test's result (the
recorded run kept no model), the node figures (FixedNodesBackend); paths are shown from the
working folder, which is the test's own."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from textual.widgets import Input
from tui_support import (
    RECORDED,
    RECORDED_RUN,
    FleetSnapshotBackend,
    SnapshotBackend,
    fixed_context_cloud,
    recorded_state,
    screen_lines,
    settings_for,
    wait_for,
)

from torchdeck.backends import triage
from torchdeck.backends.base import JobState
from torchdeck.backends.eks.plan import ClusterPlan, parse_nodegroup, save_plan
from torchdeck.tui.app import make_app
from torchdeck.tui.screens.board import NodesScreen, QueuesScreen
from torchdeck.tui.screens.cluster import ClusterScreen
from torchdeck.tui.screens.confirm import ConfirmScreen
from torchdeck.tui.screens.help import HelpScreen
from torchdeck.tui.screens.home import HomeScreen
from torchdeck.tui.screens.image import ImageScreen
from torchdeck.tui.screens.launch import LaunchScreen
from torchdeck.tui.screens.model_test import ModelTestScreen
from torchdeck.tui.screens.pick_ranks import PickRanksScreen
from torchdeck.tui.screens.storage import StorageScreen

SIZES = {"80x24": (80, 24), "120x40": (120, 40)}
FINISHED_AT = json.loads((RECORDED / RECORDED_RUN / "exit.json").read_text())["finished_at"]


async def steady(pilot) -> None:
    """No blinking cursor (it would be on in one picture and off in the next), and the screen
    settled."""
    for widget in pilot.app.screen.query(Input):
        widget.cursor_blink = False
    await pilot.pause(0.3)


async def _runs_listed(pilot) -> None:
    await wait_for(
        pilot,
        lambda: (
            isinstance(pilot.app.screen, HomeScreen)
            and "reading runs" not in str(pilot.app.screen.query_one("#detail").render())
        ),
        what="the runs",
    )


async def _open(pilot, key: str, screen_type: type, ready=lambda screen: True) -> None:
    await _runs_listed(pilot)
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, screen_type) and ready(pilot.app.screen), what=key)


def _filled_plan(tmp_path) -> None:
    """A whole plan in cluster.yaml (the wizard opens on it), in the wizard's own field syntax."""
    system = parse_nodegroup("system:m5.large:1:2:2", "system")
    system.labels = {"role": "system"}
    plan = ClusterPlan(
        name="torchdeck-demo",
        region="us-west-2",
        zones=["us-west-2a", "us-west-2b"],
        nodegroups=[system, parse_nodegroup("gpu:g5.xlarge:0:1:2:gpu", "workers")],
        s3_bucket="torchdeck-models",
    )
    save_plan(plan, tmp_path / "cluster.yaml")


CASES = {
    "runs_empty": (False, _runs_listed),
    "runs": (True, _runs_listed),
    "launch": (True, lambda pilot: _open(pilot, "n", LaunchScreen)),
    "cluster_empty": (False, lambda pilot: _open(pilot, "c", ClusterScreen)),
    "cluster_filled": (False, lambda pilot: _open(pilot, "c", ClusterScreen, lambda s: s.plan is not None)),
    "storage": (False, lambda pilot: _open(pilot, "v", StorageScreen)),
    "image": (False, lambda pilot: _open(pilot, "i", ImageScreen, lambda s: s.context is not None)),
    "model_test": (True, lambda pilot: _open(pilot, "t", ModelTestScreen, lambda s: s.result is not None)),
    "help": (False, lambda pilot: _open(pilot, "question_mark", HelpScreen)),
    "confirm": (True, None),
    "pick_ranks": (True, None),
    "triage": (True, None),
    "resume_offer": (True, None),
    "fleet": (True, _runs_listed),
    "nodes": (True, lambda pilot: _open(pilot, "m", NodesScreen, lambda s: s.reads > 0)),
    "queues": (True, lambda pilot: _open(pilot, "w", QueuesScreen, lambda s: s.reads > 0)),
}
CLUSTER_VIEWS = ("fleet", "nodes", "queues")
"""The cases drawn on a cluster backend's stand-in (``FleetSnapshotBackend``)."""
LOST_NODE = {
    "ip-10-0-1-7.us-west-2.compute.internal": (
        "NotReady (Kubelet stopped posting node status.); ended its pod "
        "(DeletionByTaintManager: Taint manager: deleting due to NoExecute taint)"
    )
}
"""For the resume offer's picture: what the kubernetes backend says of a node the node lifecycle
controller lost (its words and their source: tests/kube, test_a_run_that_failed_on_a_bad_node...)."""
TRIAGE = Path(__file__).parent.parent / "data" / "triage"


def _kept_triage(state: Path) -> None:
    """A verdict kept with the recorded run, made from a real hang's dumps (tests/data/triage)."""
    folder = state / "runs" / RECORDED_RUN / "triage"
    folder.mkdir()
    dumps = [json.loads((TRIAGE / f"rank-{r}.json").read_text()) for r in (0, 1)]
    verdict = triage.explain(RECORDED_RUN, [triage.rank_where(d) for d in dumps], 2, str(folder))
    triage.save(folder, dataclasses.replace(verdict, time=FINISHED_AT - 60))


def _case_app(tmp_path, monkeypatch, case: str, ascii: bool):
    from torchdeck.tui.screens import home

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(home, "time", SimpleNamespace(time=lambda: FINISHED_AT + 5400))  # 1h30m after it ended
    recorded, _ = CASES[case]
    if recorded:
        state = recorded_state(tmp_path)
    else:
        state = tmp_path / "state"
        state.mkdir()
    if case == "cluster_filled":
        _filled_plan(tmp_path)
    if case == "triage":
        _kept_triage(state)
    backend = FleetSnapshotBackend(state) if case in CLUSTER_VIEWS else SnapshotBackend(state)
    if case == "resume_offer":  # the recorded run, as a cluster run that failed on a lost node shows
        backend.ended_on = (JobState.FAILED, LOST_NODE)
    return make_app(settings_for(state, ascii=ascii), backend, cloud=fixed_context_cloud(state))


async def _ready(pilot, case: str) -> None:
    _, ready = CASES[case]
    if case in ("pick_ranks", "triage", "resume_offer"):  # over the recorded run's monitor, once it has drawn it all
        from tui_support import monitor_ready, text_of

        await _runs_listed(pilot)
        await pilot.press("enter")
        screen = await monitor_ready(pilot)
        if case == "triage":
            await wait_for(pilot, lambda: screen.triage is not None, what="the kept verdict")
            await steady(pilot)
            return
        if case == "resume_offer":
            await wait_for(pilot, lambda: "from step" in text_of(screen, "#offer"), what="the offer", timeout=15)
            await steady(pilot)
            return
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, PickRanksScreen), what="the question")
    elif case == "confirm":
        await _runs_listed(pilot)
        pilot.app.push_screen(ConfirmScreen(f"Stop {RECORDED_RUN} and every process it started?"))
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), what="the question")
    else:
        await ready(pilot)
    if case == "cluster_filled":
        await pilot.press("f2")  # at 80 columns, the plan and its cost (at 120 they show beside the form)
    await steady(pilot)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("size", list(SIZES))
def test_screen(tmp_path, monkeypatch, snap_compare, case, size):
    app = _case_app(tmp_path, monkeypatch, case, ascii=False)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=lambda pilot: _ready(pilot, case))


@pytest.mark.parametrize("case", list(CASES))
def test_screen_in_ascii(tmp_path, monkeypatch, snap_compare, case):
    shown: list[str] = []

    async def ready(pilot) -> None:
        await _ready(pilot, case)
        shown.append(screen_lines(pilot.app))

    app = _case_app(tmp_path, monkeypatch, case, ascii=True)
    assert snap_compare(app, terminal_size=(80, 24), run_before=ready)
    bad = sorted({c for c in shown[0] if ord(c) > 127})
    assert bad == [], f"non-ASCII characters on the {case} screen: {bad}"


SNAPSHOTS = Path(__file__).parent / "__snapshots__"
PICTURES = {
    "runs": "test_snapshots/test_screen[120x40-runs].svg",
    "launch": "test_snapshots/test_screen[120x40-launch].svg",
    "monitor": "test_console/test_monitor_snapshot_120x40.svg",
    "model-test": "test_snapshots/test_screen[120x40-model_test].svg",
    "cluster": "test_snapshots/test_screen[120x40-cluster_filled].svg",
    "storage": "test_snapshots/test_screen[120x40-storage].svg",
    "image": "test_snapshots/test_screen[120x40-image].svg",
    "monitor-80x24": "test_console/test_monitor_snapshot_80x24.svg",
    "compare": "test_compare_screen/test_comparison_picture[120x40].svg",
    "triage": "test_snapshots/test_screen[120x40-triage].svg",
    "resume-offer": "test_snapshots/test_screen[120x40-resume_offer].svg",
    "fleet": "test_snapshots/test_screen[120x40-fleet].svg",
    "nodes": "test_snapshots/test_screen[120x40-nodes].svg",
    "queues": "test_snapshots/test_screen[120x40-queues].svg",
}
"""The pictures of the README and the guides (docs/screens/NAME.svg): copies of the reviewed snapshots, made by
scripts/screenshots."""


def test_the_readme_pictures_are_the_reviewed_snapshots():
    docs = Path(__file__).parent.parent.parent / "docs" / "screens"
    root = Path(__file__).parent.parent.parent
    pages = (root / "README.md").read_text() + "".join(p.read_text() for p in (root / "docs").glob("*.md"))
    for name, snapshot in PICTURES.items():
        picture = docs / f"{name}.svg"
        assert picture.read_bytes() == (SNAPSHOTS / snapshot).read_bytes(), f"run scripts/screenshots ({name})"
        assert f"screens/{name}.svg" in pages, f"no page shows {name}.svg"
