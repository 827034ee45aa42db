"""The EKS cluster wizard screen, driven with Textual's Pilot: fields checked
as they are typed, the plan saved and read back, the region's catalogue from
EC2 (moto's server), and a create with its progress (moto and kmock)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import yaml
from eks_support import REGION, make_plan
from textual.widgets import DataTable, Input, RichLog
from tui_support import FixedNodesBackend, settings_for, text_of, type_into, wait_for

from torchdeck.backends.eks.plan import load_plan, plan_to_yaml
from torchdeck.tui.app import make_app
from torchdeck.tui.screens.cluster import ClusterScreen

pytestmark = pytest.mark.slow  # the fast lane (./scripts/test --fast) leaves these out


def wizard_app(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    return make_app(settings_for(state, aws_poll_s=0.02), FixedNodesBackend(state))


def test_each_field_says_what_is_wrong_as_it_is_typed_and_the_plan_saves_and_reads_back(tmp_path, monkeypatch):
    async def scenario():
        app = wizard_app(tmp_path, monkeypatch)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.press("c")
            screen = app.screen
            assert isinstance(screen, ClusterScreen)
            await type_into(pilot, screen, "name", "my_cluster")
            assert "has '_'" in text_of(screen, "#e-name")
            assert "the plan shows here" in text_of(screen, "#plan-yaml")
            await type_into(pilot, screen, "name", "demo")
            assert text_of(screen, "#e-name") == ""
            await type_into(pilot, screen, "workers", "gpu:m5.large:0:1:2:gpu")
            assert "m5.large has no GPU" in text_of(screen, "#e-workers")
            await type_into(pilot, screen, "workers", "gpu:g5.xlarge:3:1:2:gpu")
            assert "3 is more than max_size 2" in text_of(screen, "#e-workers")
            await type_into(pilot, screen, "workers", "gpu:g5.xlarge:0:1:2:gpu")
            await type_into(pilot, screen, "bucket", "torchdeck-models")
            assert "kind: ClusterConfig" in text_of(screen, "#plan-yaml")
            assert "estimated total" in text_of(screen, "#cost")
            await pilot.press("ctrl+s")
            await pilot.pause()
            saved = load_plan(tmp_path / "cluster.yaml")
            assert saved.name == "demo" and [g.name for g in saved.nodegroups] == ["system", "gpu"]
            assert saved.nodegroups[1].gpu and saved.s3_bucket == "torchdeck-models"
            await pilot.press("escape")
            await pilot.press("c")  # opens again on the saved plan
            await pilot.pause()
            again = app.screen
            assert again.query_one("#f-name", Input).value == "demo"
            assert again.query_one("#f-workers", Input).value == "gpu:g5.xlarge:0:1:2:gpu"
            assert again.plan is not None and plan_to_yaml(again.plan) == (tmp_path / "cluster.yaml").read_text()

    asyncio.run(scenario())


def test_the_catalogue_comes_from_ec2_and_zones_that_lack_a_type_are_named(tmp_path, monkeypatch, aws_env):
    async def scenario():
        app = wizard_app(tmp_path, monkeypatch)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.press("c")
            screen = app.screen
            await type_into(pilot, screen, "name", "demo")
            await type_into(pilot, screen, "region", REGION)
            screen.query_one("#f-zones", Input).value = ""
            await pilot.press("ctrl+l")  # no zones yet: EC2's zones of the region, the first three offered
            await wait_for(pilot, lambda: "(from EC2)" in text_of(screen, "#catalogue-source"), what="the catalogue")
            assert screen.query_one("#f-zones", Input).value == f"{REGION}a,{REGION}b,{REGION}c"
            await type_into(pilot, screen, "zones", f"{REGION}a,{REGION}f")
            await pilot.press("ctrl+l")
            await wait_for(
                pilot,
                lambda: "us-east-1a, us-east-1f (from EC2)" in text_of(screen, "#catalogue-source"),
                what="the catalogue of two zones",
            )
            table = screen.query_one("#catalogue", DataTable)
            rows = {str(table.get_row(key)[0]): table.get_row(key) for key in table.rows}
            assert rows["g5.xlarge"][3] == "1x A10G 22.4G" and rows["g5.xlarge"][5] == "1.006"
            assert "p4d.24xlarge" not in rows  # not offered in us-east-1f
            await type_into(pilot, screen, "workers", "big:p4d.24xlarge:0:1:1:gpu")
            assert "p4d.24xlarge is not offered in us-east-1f" in text_of(screen, "#e-workers")
            table.focus()
            table.move_cursor(row=list(rows).index("g5.xlarge"))
            await pilot.press("a")
            assert screen.query_one("#f-workers", Input).value.endswith("gpu-g5-xlarge:g5.xlarge:0:1:2:gpu")

    asyncio.run(scenario())


def test_create_from_the_wizard_shows_phase_elapsed_time_and_events(
    tmp_path, monkeypatch, aws_env, moto_gaps, vpc, kube
):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no eksctl: the native path
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    moto_gaps.quotas.update({"L-DB2E81BA": 64, "L-1216C47A": 64})
    (tmp_path / "cluster.yaml").write_text(plan_to_yaml(make_plan(vpc)))

    async def scenario():
        app = wizard_app(tmp_path, monkeypatch)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.press("c")
            screen = app.screen
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: app.screen is not screen, what="the confirmation")
            assert "about $1.30 an hour" in str(app.screen.query_one("Label").render())
            await pilot.press("y")
            log = screen.query_one("#progress", RichLog)
            await wait_for(
                pilot,
                lambda: any("cluster demo is ready" in line.text for line in log.lines),
                timeout=60,
                what="the create to finish",
            )
            lines = [line.text for line in log.lines]
            assert any("ok    credentials:" in line for line in lines)
            assert any("] cluster: cluster demo is ACTIVE" in line for line in lines)
            assert "create: done" in text_of(screen, "#phase")

    asyncio.run(scenario())
    config = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    assert config["current-context"] == "torchdeck-demo"
