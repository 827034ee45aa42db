"""The storage and image screens and the home screen's cloud line, driven
with Textual's Pilot against moto's server and a kmock cluster made on the
native path (the same fixtures as tests/cloud/test_eks_storage.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml
from eks_support import REGION
from textual.widgets import Input, RichLog, Select
from tui_support import FixedNodesBackend, settings_for, text_of, type_into, wait_for

from torchdeck.backends.eks.session import AwsSession
from torchdeck.tui.app import make_app
from torchdeck.tui.screens.image import ImageScreen
from torchdeck.tui.screens.storage import StorageScreen

pytestmark = pytest.mark.slow  # the fast lane (./scripts/test --fast) leaves these out


def logged(screen) -> list[str]:
    return [line.text for line in screen.query_one("#progress", RichLog).lines]


def test_the_storage_screen_checks_fields_creates_and_the_home_screen_counts_the_cost(
    eks_cluster, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    state = eks_cluster.path.parent.parent
    app = make_app(settings_for(state, aws_poll_s=0.02), FixedNodesBackend(state))

    async def scenario():
        async with app.run_test(size=(160, 50)) as pilot:
            home = app.screen
            await wait_for(pilot, lambda: "/h now" in text_of(home, "#cloud"), what="the cloud line")
            assert "in demo" in text_of(home, "#cloud") and "eks-nodegroup" in text_of(home, "#cloud")
            await pilot.press("v")
            screen = app.screen
            assert isinstance(screen, StorageScreen)
            assert screen.query_one("#f-cluster", Input).value == "demo"  # the only cluster torchdeck knows
            await type_into(pilot, screen, "bucket", "Bad_Bucket")
            assert "is not a valid bucket name" in text_of(screen, "#e-bucket")
            phase = text_of(screen, "#phase")
            await pilot.press("ctrl+r")  # no data preparation from a form with an error
            await app.workers.wait_for_complete()  # one, had it started
            await pilot.pause()
            assert not any("data:" in line for line in logged(screen)) and text_of(screen, "#phase") == phase
            await type_into(pilot, screen, "bucket", "torchdeck-models-demo")
            await wait_for(
                pilot,
                lambda: "s3://torchdeck-models-demo/models/ only" in text_of(screen, "#summary"),
                what="the whole name checked",
            )
            assert text_of(screen, "#e-bucket") == ""
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: app.screen is not screen, what="the confirmation")
            await pilot.press("y")
            await wait_for(
                pilot,
                lambda: any("storage ready" in line for line in logged(screen)),
                timeout=60,
                what="the create to finish",
            )
            assert any("mount target" in line for line in logged(screen))
            assert text_of(screen, "#phase") == "create: done"
            # the create's typed result (StorageReady) is what goes into the console's spec file
            written = yaml.safe_load((state / "torchdeck.yaml").read_text())
            assert written["cluster"]["pvc"] == "shared"
            assert written["model_file"] == "s3://torchdeck-models-demo/models/model.pt"
            assert any("torchdeck.yaml: cluster.pvc=shared" in line for line in logged(screen))
            await pilot.press("ctrl+t")
            await wait_for(  # the status's own bucket line (the create's says "public access blocked" too)
                pilot,
                lambda: any("public access blocked, encryption on" in line for line in logged(screen)),
                what="the status",
            )
            assert any("tcp/2049 from sg-" in line for line in logged(screen))
            assert any(line.startswith("EFS fs-") and "available, encrypted" in line for line in logged(screen))
            await pilot.press("escape")
            await wait_for(
                pilot,
                lambda: "efs-filesystem" in text_of(home, "#cloud"),
                timeout=15,
                what="the new file system on the home screen",
            )

    asyncio.run(scenario())
    assert AwsSession(REGION).call("efs", "describe_file_systems")["FileSystems"]


def test_the_image_screen_builds_pushes_and_pins_the_digest(eks_cluster, tmp_path, monkeypatch, standin_docker):
    monkeypatch.chdir(tmp_path)
    state = eks_cluster.path.parent.parent
    app = make_app(settings_for(state, aws_poll_s=0.02), FixedNodesBackend(state))

    async def scenario():
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.press("i")
            screen = app.screen
            assert isinstance(screen, ImageScreen)
            await wait_for(
                pilot,
                lambda: "a Docker engine answers here: builds with docker" in text_of(screen, "#summary"),
                what="the engine and the context tag",
            )
            await type_into(pilot, screen, "repository", "Bad Repo")
            assert "is not an ECR repository name" in text_of(screen, "#e-repository")
            await type_into(pilot, screen, "repository", "trainer")
            # a step that fails says so once: in the log, on the phase line and in one notification
            failures: list[str] = []
            notify = app.notify

            def noting(text: str, **kw: Any) -> None:
                failures.append(kw.get("title", ""))
                notify(text, **kw)

            monkeypatch.setattr(app, "notify", noting)
            await type_into(pilot, screen, "cluster", "ghost")  # a Kaniko build needs a cluster torchdeck knows
            screen.query_one("#f-builder", Select).value = "kaniko"
            await pilot.press("ctrl+g")
            await wait_for(pilot, lambda: any("image failed: " in line for line in logged(screen)), what="the failure")
            await wait_for(pilot, lambda: text_of(screen, "#phase").startswith("build: stopped"), what="the phase")
            assert text_of(screen, "#phase").startswith("build: stopped in ") and failures == ["image failed"]
            assert "image failed: building in the cluster needs a bucket" in "".join(logged(screen))
            await type_into(pilot, screen, "cluster", "demo")
            screen.query_one("#f-builder", Select).value = "auto"
            await pilot.press("ctrl+g")
            await wait_for(
                pilot, lambda: any(": image: " in line for line in logged(screen)), timeout=60, what="the digest pinned"
            )

    asyncio.run(scenario())
    pinned = yaml.safe_load((state / "torchdeck.yaml").read_text())["image"]
    (image,) = AwsSession(REGION).call("ecr", "describe_images", repositoryName="trainer")["imageDetails"]
    assert pinned.endswith("/trainer@" + image["imageDigest"])
