"""Issue 51: on a shared cluster, other people's objects are input too. Anyone who may create a job
may give it torchdeck's labels and a spec annotation; run ids are guessable. A run is what torchdeck
recorded making (cluster, namespace, kind, name, uid), its pods are those its job owns, and nothing
torchdeck did not make is resumed, stopped or followed as a rank on a label's word."""

from __future__ import annotations

import asyncio
import json

import pytest
from kube_jobs import NS, cluster_cli, install, make_pod, make_spec, metric_line, set_conditions

from torchdeck.backends.errors import BackendError, FoundByLabel
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.kubernetes.identity import NotOurs

OTHER = "someone-else"
PYTORCHJOBS = "apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"


@pytest.fixture
def cli(kube_api, tmp_path):
    """``torchdeck --backend kubernetes ARGS`` with this test's state folder, no terminal."""
    return cluster_cli(kube_api, tmp_path)


def plant(backend, obj, namespace, **changes):
    """A copy of ``obj`` made by someone else in ``namespace`` (its labels and annotations kept)."""
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "labels", "annotations")}
    body = {**obj, "metadata": {**meta, **changes.pop("metadata", {})}, **changes}
    body.pop("status", None)
    path = PYTORCHJOBS.format(ns=namespace)
    return backend.client.request("POST", path, body=body)


def job(backend, run_id, namespace=NS):
    return backend.client.request("GET", f"{PYTORCHJOBS.format(ns=namespace)}/{run_id}")


def test_a_decoy_with_a_stopped_runs_labels_and_spec_is_never_what_resume_submits(kube_api, tmp_path, cli):
    """A run is stopped (its job deleted). Someone plants a failed PyTorchJob of the same name in
    another namespace with its labels and a spec annotation of their own (their namespace, claim,
    image), and a never-ending one labelled as resuming it. ``resume`` plans and submits the spec
    torchdeck kept at submit, in the run's own namespace, and is not held up by the decoy resumer."""
    backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(backend)
    run_id = backend.submit(make_spec())
    ours = job(backend, run_id)
    set_conditions(backend, run_id, "Created", "Running")
    assert cli("stop", run_id).returncode == 0

    theirs = json.loads(ours["metadata"]["annotations"]["torchdeck.dev/spec"])
    theirs.update(namespace=OTHER, image="evil.example/miner:1")
    theirs["cluster"].update(pvc="their-claim", service_account="their-admin")
    note = {"torchdeck.dev/spec": json.dumps(theirs)}
    decoy = plant(backend, ours, OTHER, metadata={"annotations": {**ours["metadata"]["annotations"], **note}})
    backend.client.request(
        "PATCH",
        f"{PYTORCHJOBS.format(ns=OTHER)}/{run_id}/status",
        body={"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PyTorchJobFailed"}]}},
    )
    plant(backend, ours, OTHER, metadata={"name": "blocker", "labels": {"torchdeck.dev/resumes": run_id}})

    plan = cli("resume", run_id, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert f"namespace: {NS}" in plan.stdout and "claimName: shared" in plan.stdout
    assert OTHER not in plan.stdout and "their-claim" not in plan.stdout and "evil.example" not in plan.stdout

    resumed = cli("resume", run_id, "--detach")
    assert resumed.returncode == 0, resumed.stderr
    new_id = resumed.stdout.strip()
    assert "resume plan: cifar10 from its newest checkpoint" in resumed.stderr
    assert f"namespace {NS}, pytorchjob, service account torchdeck-s3, claim shared" in resumed.stderr
    assert job(backend, new_id)["metadata"]["labels"]["torchdeck.dev/resumes"] == run_id
    assert job(backend, run_id, OTHER)["metadata"]["uid"] == decoy["metadata"]["uid"]  # left as it was


def test_stop_deletes_the_run_torchdeck_made_and_not_a_decoy_of_the_same_name(kube_api, tmp_path, cli):
    """A decoy PyTorchJob with the run's name and labels in another namespace, seen first by a label
    search: ``stop`` deletes the recorded run, the decoy stays; ``jobs`` shows the decoy as found by
    label only."""
    backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(backend)
    run_id = backend.submit(make_spec())
    set_conditions(backend, run_id, "Created", "Running")
    plant(backend, job(backend, run_id), OTHER)

    listed = cli("jobs")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split()[0:3] for line in listed.stdout.splitlines()[1:]]
    assert [run_id, "running"] in [r[:2] for r in rows] and [run_id, "(label", "only)"] in rows

    stopped = cli("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    assert backend.client.exists(f"{PYTORCHJOBS.format(ns=OTHER)}/{run_id}")
    assert not backend.client.exists(f"{PYTORCHJOBS.format(ns=NS)}/{run_id}")


def test_an_object_that_took_a_runs_name_is_not_the_run(kube_api, tmp_path, cli):
    """The run's job is deleted and someone makes another of the same name and labels in the same
    namespace: its uid is not the recorded one, so status, logs and stop refuse it in one line each,
    and it is left alone."""
    backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(backend)
    run_id = backend.submit(make_spec())
    ours = job(backend, run_id)
    backend.client.request("DELETE", f"{PYTORCHJOBS.format(ns=NS)}/{run_id}")
    again = plant(backend, ours, NS)
    for args in (("status", run_id), ("logs", run_id), ("stop", run_id), ("resume", run_id)):
        said = cli(*args)
        assert said.returncode != 0 and said.stderr.count("\n") == 1, (args, said.stderr)
        assert f"is not the run torchdeck made as {run_id}" in said.stderr, (args, said.stderr)
    assert job(backend, run_id)["metadata"]["uid"] == again["metadata"]["uid"]
    with pytest.raises(NotOurs):
        KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state").status(run_id)


def test_a_run_found_by_label_alone_is_shown_as_such_and_stopped_only_when_the_user_says_so(kube_api, tmp_path, cli):
    """A run submitted from another machine (another state folder): this one has no record of it.
    ``status`` says it was found by label; ``stop`` without a terminal refuses in one line and the
    job stays; ``stop --yes`` stops it. A label-only run of the user's code is not resumed with a
    code folder nobody recorded."""
    elsewhere = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "another-machine")
    install(elsewhere)
    run_id = elsewhere.submit(make_spec())
    set_conditions(elsewhere, run_id, "Created", "Running")

    shown = cli("status", run_id)
    assert shown.returncode == 0, shown.stderr
    assert f"found by label: torchdeck has no record of making {run_id} here" in shown.stdout
    assert json.loads(cli("status", run_id, "--output", "json").stdout)["found_by_label"] is True

    refused = cli("stop", run_id)
    assert refused.returncode == 1 and refused.stderr.splitlines()[-1].startswith("torchdeck: error:"), refused.stderr
    assert f"{run_id} was not stopped (hint: torchdeck stop {run_id} --yes, if it is yours)" in refused.stderr
    assert "no (not a terminal: --yes answers yes)" in refused.stderr
    assert elsewhere.client.exists(f"{PYTORCHJOBS.format(ns=NS)}/{run_id}")
    here = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    with pytest.raises(FoundByLabel):
        here.cancel(run_id)

    assert cli("stop", run_id, "--yes").returncode == 0
    assert not elsewhere.client.exists(f"{PYTORCHJOBS.format(ns=NS)}/{run_id}")

    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    user = make_spec(entrypoint={"script": "train.py", "code": str(code)})
    user_id = elsewhere.submit(user)
    set_conditions(elsewhere, user_id, "Created", "Failed")
    with pytest.raises(BackendError, match="no record here of the folder it was packed from"):
        here.resume_spec(user_id, trust_label=True)
    said = cli("resume", user_id, "--yes", "--dry-run")
    assert said.returncode == 1 and "no record here of the folder it was packed from" in said.stderr


def test_a_pod_with_a_runs_labels_that_its_job_does_not_own_is_no_rank(kube_api, tmp_path):
    """A pod planted with the run's labels, its log carrying a step line that claims rank 0 and an
    error: it is not among the run's pods, its lines are neither metrics nor log lines, and the run's
    status reads its loss from its own pod."""
    backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(backend)
    run_id = backend.submit(make_spec(nodes=1))
    em = kube_api.emulator
    kube_api.call(em.script_log, NS, f"{run_id}-master-0", [metric_line(0, 5, loss=0.5)])
    planted = [metric_line(0, 900, loss=99.0), json.dumps({"schema": 1, "event": "error", "rank": 0,
               "time": 1_790_000_001.0, "message": "\x1b]0;pwned\x07 CUDA out of memory"})]  # fmt: skip
    kube_api.call(em.script_log, NS, f"{run_id}-master-1", planted)
    make_pod(backend, run_id, f"{run_id}-master-0", "master")
    make_pod(backend, run_id, f"{run_id}-master-1", "master", owner=None)
    set_conditions(backend, run_id, "Created", "Running")

    assert [p.name for p in backend.pods(run_id, NS)] == [f"{run_id}-master-0"]
    status = backend.status(run_id)
    assert status.step == 5 and status.loss == 0.5 and "pwned" not in status.reason
    texts = [line.text for batch in backend.logs(run_id) for line in batch]
    assert texts and not any("pwned" in t or "step 900" in t or "99.0" in t for t in texts)


def test_triage_keys_each_dump_by_the_pod_it_came_from_and_reads_any_dump_without_a_traceback(kube_api, tmp_path):
    """Rank 1's pod says a dump that claims to be rank 0's, with a rank of 1e999 and a pid of "x"
    in another: each is read as its pod's own rank, nothing raises, and no pod speaks for another."""
    backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(backend)
    run_id = backend.submit(make_spec(nodes=2, nproc_per_node=1))
    frames = [{"file": "/code/train.py", "line": 12, "function": "main", "code": "dist.all_reduce(t)"}]

    def dump(rank, where):
        threads = [{"name": "MainThread", "main": True, "frames": [{**frames[0], "line": where}]}]
        return json.dumps({"schema": 1, "event": "triage", "rank": rank, "dump": {
            "rank": rank, "pid": "x", "host": "h", "threads": threads, "flight_recorder": None}})  # fmt: skip

    em = kube_api.emulator
    kube_api.call(em.script_log, NS, f"{run_id}-master-0", [dump(0, 12)], ended=False)
    kube_api.call(em.script_log, NS, f"{run_id}-worker-0", [dump(0, 40).replace('"rank": 0', '"rank": 1e999')])
    make_pod(backend, run_id, f"{run_id}-master-0", "master", node="cpu-0")
    make_pod(backend, run_id, f"{run_id}-worker-0", "worker", node="cpu-0")
    set_conditions(backend, run_id, "Created", "Running")
    verdict = backend.triage(run_id)
    assert sorted(r.rank for r in verdict.ranks) == [0, 1]
    by_rank = {r.rank: r for r in verdict.ranks}
    assert by_rank[1].where == "train.py:40" and by_rank[0].where == "train.py:12"
    assert by_rank[1].node == f"pod {run_id}-worker-0 on node cpu-0" and by_rank[0].pid == 0


def test_the_console_asks_before_stopping_a_run_found_by_its_label_and_says_why(kube_api, tmp_path):
    """The runs screen shows a run submitted from another machine as found by its label; s asks,
    saying so, and only yes stops it."""
    from textual.widgets import DataTable
    from tui_support import wait_for

    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.confirm import ConfirmScreen
    from torchdeck.tui.screens.home import HomeScreen

    elsewhere = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "another-machine")
    install(elsewhere)
    run_id = elsewhere.submit(make_spec())
    set_conditions(elsewhere, run_id, "Created", "Running")
    settings = Settings(backend="kubernetes", state_dir=tmp_path / "state", refresh_hz=10)

    async def scenario():
        app = make_app(settings, KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state"))
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(
                pilot, lambda: isinstance(app.screen, HomeScreen) and len(app.screen.statuses) == 1, what="the run"
            )
            table = app.screen.query_one("#runs", DataTable)
            await wait_for(pilot, lambda: table.row_count == 1, what="the run's row")
            assert str(table.get_row_at(0)[0]) == f"{run_id} (label only)"
            await pilot.press("s")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question")
            assert "was found by its label only: torchdeck has no record of making it here" in app.screen.question
            await pilot.press("n")
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen), what="the runs again")
            await app.workers.wait_for_complete()  # a stop, had one started
            assert elsewhere.client.exists(f"{PYTORCHJOBS.format(ns=NS)}/{run_id}")
            await pilot.press("s")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the question again")
            await pilot.press("y")
            await wait_for(
                pilot, lambda: not elsewhere.client.exists(f"{PYTORCHJOBS.format(ns=NS)}/{run_id}"), what="the stop"
            )

    asyncio.run(scenario())
