"""The plan is the request (issue 43): what ``train --dry-run`` prints, what ``render`` prints and
what ``submit`` creates are one ``Plan``; every object that reaches the API server is the plan's,
field for field, in the plan's order, under the plan's run id."""

from __future__ import annotations

import re

import pytest
import yaml
from kube_jobs import IMAGE, NS, install, make_spec

from torchdeck.backends.errors import BackendError, RunIdTaken
from torchdeck.backends.kubernetes.client import api_path
from torchdeck.backends.kubernetes.jobs import api_of
from torchdeck.cli.main import main

RUNNABLE = ("pytorchjob", "trainjob", "mpijob", "job")
"""The kinds kmock holds a CRD for that torchdeck submits (elasticjob: render-only)."""


def contains(server: object, sent: object, where: str = "") -> list[str]:
    """Where the server's object differs from what was sent (the server may add fields, never change one)."""
    if isinstance(sent, dict):
        if not isinstance(server, dict):
            return [f"{where}: not a mapping"]
        return [d for k, v in sent.items() for d in contains(server.get(k), v, f"{where}.{k}")]
    if isinstance(sent, list):
        if not isinstance(server, list) or len(server) != len(sent):
            return [f"{where}: a list of {len(sent)} sent, {len(server) if isinstance(server, list) else '?'} kept"]
        return [d for i, (a, b) in enumerate(zip(server, sent, strict=True)) for d in contains(a, b, f"{where}[{i}]")]
    return [] if server == sent else [f"{where}: sent {sent!r:.60}, kept {server!r:.60}"]


@pytest.mark.parametrize("kind", RUNNABLE)
def test_what_reaches_the_api_server_is_the_plan_shown(kube_backend, kind, tmp_path) -> None:
    install(kube_backend)
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('step 1/2 loss: 1.0')\n")
    entry = {"script": "train.py", "code": str(code)} if kind != "mpijob" else {}
    plan = kube_backend.plan(make_spec(cluster={"kind": kind}, entrypoint=entry))
    shown = plan.text(full=True)
    assert plan.findings == [] and "# preflight: the cluster can run it" in shown
    assert [d for d in yaml.safe_load_all(shown) if d] == plan.objects  # the text is the objects (whole)
    if entry:  # as a person reads it: the bundle as its files and size, not its base64
        brief = plan.text()  # the user's file and torchdeck's own (its exit marker, the triage probe)
        assert re.search(r"# code bundle: \d+ file\(s\), \d+ B \(\d+\.\d KiB packed\) from .*/code\n", brief)
        assert "<1 key(s), " in brief and len(brief) < len(shown)
    assert plan.run_id in shown and plan.objects[-1]["metadata"]["name"] == plan.run_id
    if entry:
        assert plan.code.startswith(f"configmap {NS}/") and any(o["kind"] == "ConfigMap" for o in plan.objects)

    assert kube_backend.submit(plan) == plan.run_id
    for sent in plan.objects:
        kept = kube_backend.client.request("GET", api_path(api_of(sent["kind"]), NS, sent["metadata"]["name"]))
        assert contains(kept, sent) == [], (sent["kind"], contains(kept, sent)[:3])
    made = kube_backend.client.request("GET", api_path(api_of(plan.objects[-1]["kind"]), NS))["items"]
    assert [o["metadata"]["name"] for o in made] == [plan.run_id]  # nothing the plan did not show


def test_a_plan_with_findings_is_refused_whole_and_makes_nothing(kube_backend) -> None:
    install(kube_backend, sa=False)
    plan = kube_backend.plan(make_spec())
    assert plan.findings and "service account torchdeck-s3 does not exist" in plan.findings[0]
    with pytest.raises(BackendError) as err:
        kube_backend.submit(plan)
    assert err.value.message == plan.findings[0] and err.value.hint == plan.fixes[0]
    assert f"# preflight: {plan.findings[0]} (fix: {plan.fixes[0]})" in plan.text()
    assert kube_backend.list() == []


def test_a_plan_whose_run_id_was_taken_since_is_refused_and_a_spec_is_planned_again(kube_backend) -> None:
    install(kube_backend)
    first = kube_backend.plan(make_spec())
    kube_backend.submit(first)  # another console applies the same plan first
    with pytest.raises(RunIdTaken):
        kube_backend.submit(first)
    assert kube_backend.submit(make_spec()) not in (first.run_id, "")  # a spec: planned anew, a free id


def test_render_and_the_dry_run_print_the_same_objects(kube_api, kube_backend, tmp_path, capsys, monkeypatch) -> None:
    """``render`` is the plan made offline: for the same time (the run id's clock), name and release,
    it prints what ``train --dry-run`` prints, the run id included, with nothing copied across."""
    from torchdeck.backends import names

    install(kube_backend)
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig))
    monkeypatch.setenv("TORCHDECK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(names, "clock", lambda: 1_800_000_000.0)
    argv = ["--image", IMAGE, "--namespace", NS, "--set", "cluster.pvc=shared", "--name", "demo", "--output", "yaml"]
    assert main(["--backend", "kubernetes", "train", "--dry-run", *argv]) == 0
    dry = capsys.readouterr().out
    assert main(["render", *argv]) == 0
    rendered = capsys.readouterr().out
    head = "# plan: run demo-0115-080000 on the kubernetes backend"
    assert head in dry and head in rendered
    assert "# preflight: the cluster can run it" in dry and "# preflight not run: render reads no cluster" in rendered
    assert [d for d in yaml.safe_load_all(dry) if d] == [d for d in yaml.safe_load_all(rendered) if d]


def test_a_plan_shows_the_code_bundle_as_its_files_and_size_and_whole_in_yaml(tmp_path, capsys, monkeypatch) -> None:
    """A plan is for a person: the code bundle's ConfigMap shows as a count of its keys and bytes and
    the bundle as its files and size; ``--output yaml`` writes it whole, for kubectl apply -f -."""
    (tmp_path / "train.py").write_text("print('hello')\n")
    (tmp_path / "model.py").write_text("X = 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCHDECK_STATE_DIR", str(tmp_path / "state"))
    assert main(["render", "train.py", "--image", IMAGE]) == 0
    text = capsys.readouterr().out
    assert re.search(r"# code bundle: \d+ file\(s\)", text) and "characters: --output yaml shows them>" in text
    assert main(["render", "train.py", "--image", IMAGE, "--output", "yaml"]) == 0
    whole = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    bundle = next(d for d in whole if d["kind"] == "ConfigMap")
    assert bundle["binaryData"] and all(isinstance(v, str) and len(v) > 40 for v in bundle["binaryData"].values())


def test_a_newcomer_launches_on_the_cluster_from_the_form_alone_and_the_plan_shown_is_what_is_made(
    kube_api, kube_backend, tmp_path, monkeypatch
) -> None:
    import asyncio

    from textual.widgets import Input, Select
    from tui_support import wait_for

    from torchdeck.backends.kubernetes.backend import KubernetesBackend
    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.home import HomeScreen
    from torchdeck.tui.screens.launch import LaunchScreen
    from torchdeck.tui.screens.monitor import MonitorScreen
    from torchdeck.tui.screens.plan import PlanScreen

    install(kube_backend)
    monkeypatch.chdir(tmp_path)  # no spec file: the form starts from the defaults
    settings = Settings(backend="kubernetes", state_dir=tmp_path / "state", spec_file=tmp_path / "torchdeck.yaml")
    shown: list = []

    async def scenario():
        app = make_app(settings, KubernetesBackend(kube_api.kubeconfig))
        async with app.run_test(size=(100, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen), what="the runs")
            await pilot.press("n")
            await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the form")
            form = app.screen
            for field, value in (
                ("name", "first"),
                ("image", IMAGE),
                ("namespace", NS),
                ("nodes", "2"),
                ("cluster-pvc", "shared"),
                ("trainer-max-steps", "20"),
            ):
                form.query_one(f"#f-{field}", Input).value = value
            form.query_one("#f-cluster-kind", Select).value = "pytorchjob"
            assert not form.query("#f-data-dir") and not form.query("#f-local-image")  # the local backend's
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen), what="the plan")
            shown.append(app.screen.plan)
            text = str(app.screen.query_one("#plan-text").render())
            assert "# preflight: the cluster can run it" in text and f"name: {shown[0].run_id}" in text
            await pilot.press("ctrl+l")
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the run's monitor")

    asyncio.run(scenario())
    plan = shown[0]
    assert plan.spec.nodes == 2 and plan.spec.image == IMAGE and plan.spec.trainer.max_steps == 20
    assert [s.run_id for s in kube_backend.list()] == [plan.run_id]
    for sent in plan.objects:
        kept = kube_backend.client.request("GET", api_path(api_of(sent["kind"]), NS, sent["metadata"]["name"]))
        assert contains(kept, sent) == []
