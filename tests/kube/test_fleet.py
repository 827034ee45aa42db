"""Issue 55: the whole shared cluster in one console. Every training job the user may list, not
only torchdeck's, with where it is, its queue and who made it; filters and sorts; a job torchdeck
did not make followed read-only by its reference (status, logs) and never stopped or written to;
the nodes' room, use, training jobs and trouble; the queues' usage and waiting lines."""

from __future__ import annotations

import json
import time

from kube_jobs import NS, THEIRS, cluster_cli, install, make_spec, metric_line, set_conditions, their_job

from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.kubernetes.client import api_path
from torchdeck.backends.kubernetes.jobs import api_of
from torchdeck.backends.views import NodesView, node_cells


def their_pod(backend, job, index, node, namespace=THEIRS, cpu="2", memory="4Gi"):
    meta = job["metadata"]
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": meta["name"], "uid": meta["uid"],
             "controller": True}  # fmt: skip
    body = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{meta['name']}-worker-{index}", "namespace": namespace, "ownerReferences": [owner],
                     "labels": {"training.kubeflow.org/job-name": meta["name"],
                                "training.kubeflow.org/replica-type": "worker",
                                "training.kubeflow.org/replica-index": str(index)}},
        "spec": {"nodeName": node, "containers": [{"name": "pytorch", "image": "their/bert:1",
                                                   "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "pytorch", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": "2026-11-22T06:00:00Z"}}}]},
    }  # fmt: skip
    return backend.client.request("POST", f"api/v1/namespaces/{namespace}/pods", body=body)


def test_every_training_job_is_listed_and_anothers_is_followed_read_only(kube_api, tmp_path):
    cli = cluster_cli(kube_api, tmp_path)
    backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(backend)
    run_id = backend.submit(make_spec())
    set_conditions(backend, run_id, "Created", "Running")
    job = their_job(backend)
    ref = f"pytorchjob/{THEIRS}/bert"
    pod = their_pod(backend, job, 0, "cpu-0")
    kube_api.call(kube_api.emulator.script_log, THEIRS, pod["metadata"]["name"], ["hello", metric_line(0, 12, 1.25)])
    before = backend.client.request("GET", api_path(api_of("PyTorchJob"), THEIRS, "bert"))

    listed = cli("jobs")
    assert listed.returncode == 0, listed.stderr
    head, *rows = listed.stdout.splitlines()
    assert head.split()[2:5] == ["WHERE", "QUEUE", "BY"]
    cells = {row.split()[0]: row.split() for row in rows}
    assert cells[run_id][2:5] == [f"{NS}/PyTorchJob", "-", "torchdeck"]
    assert (
        cells[ref][1] == "pending"
        and cells[ref][5] == "4"
        and cells[ref][2:5] == [f"{THEIRS}/PyTorchJob", "-", "kubectl"]
    )

    assert [r.split()[0] for r in cli("jobs", "--mine").stdout.splitlines()[1:]] == [run_id]
    assert [r.split()[0] for r in cli("jobs", "--namespace", THEIRS).stdout.splitlines()[1:]] == [ref]
    none = cli("jobs", "--namespace", THEIRS, "--state", "failed")
    assert none.returncode == 0 and none.stdout.strip() == "no jobs here match ns:team-b state:failed (of 2)"
    by_name = [r.split()[0] for r in cli("jobs", "--sort", "name").stdout.splitlines()[1:]]
    assert by_name == sorted(by_name)
    as_json = {row["run_id"]: row for row in json.loads(cli("jobs", "--output", "json").stdout)}
    assert (
        as_json[ref]["made_by"] == "kubectl"
        and as_json[ref]["namespace"] == THEIRS
        and as_json[run_id]["made_by"] == ""
    )

    status = cli("status", ref, "--output", "json")  # read-only: its pods' logs, read as torchdeck reads its own
    assert status.returncode == 0, status.stderr
    said = json.loads(status.stdout)
    assert said["run_id"] == ref and said["step"] == 12 and said["loss"] == 1.25 and said["world_size"] == 4
    logs = cli("logs", ref)
    assert logs.returncode == 0 and "hello" in logs.stdout, logs.stderr
    for verb in ("stop", "triage"):
        refused = cli(verb, ref, "--yes") if verb == "stop" else cli(verb, ref)
        assert refused.returncode != 0 and refused.stderr.count("\n") == 1, refused.stderr
        assert (
            f"{ref} is not torchdeck's" in refused.stderr and "import pytorchjob/team-b/bert makes it" in refused.stderr
        )
    after = backend.client.request("GET", api_path(api_of("PyTorchJob"), THEIRS, "bert"))
    assert after["metadata"] == before["metadata"] and after["spec"] == before["spec"]  # nothing written to it
    assert backend.client.exists(f"api/v1/namespaces/{THEIRS}/pods/{pod['metadata']['name']}")

    for bad in ("pytorchjob/team-b/nope", "rayjob/team-b/x", "jobset/team-b/x"):
        said = cli("status", bad)
        assert said.returncode != 0 and said.stderr.count("\n") == 1, said.stderr


def test_a_job_of_junk_is_a_row_that_says_so_and_the_rest_are_listed(kube_api, tmp_path):
    backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(backend)
    their_job(backend)
    body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "junk"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "many"}}}}  # fmt: skip
    backend.client.request("POST", api_path(api_of("PyTorchJob"), THEIRS), body=body)
    rows = {s.run_id: s for s in backend.list()}
    assert set(rows) == {f"pytorchjob/{THEIRS}/bert", f"pytorchjob/{THEIRS}/junk"}
    assert "its spec does not read as a PyTorchJob's" in rows[f"pytorchjob/{THEIRS}/junk"].reason


def test_nodes_say_their_room_their_use_their_training_jobs_and_why_one_is_bad(kube_api, tmp_path):
    cli = cluster_cli(kube_api, tmp_path)
    backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(backend, cpu_nodes=3, gpu_nodes=1)
    job = their_job(backend)
    their_pod(backend, job, 0, "cpu-0", cpu="3", memory="8Gi")
    their_pod(backend, job, 1, "cpu-0", cpu="500m", memory="1Gi")
    their_pod(backend, job, 2, "cpu-1")
    for node in ("cpu-0", "cpu-1", "cpu-2"):  # as each kubelet reports its node
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
        backend.client.request("PATCH", f"api/v1/nodes/{node}", body={"status": {"conditions": [ready]}})
    backend.client.request("PATCH", "api/v1/nodes/cpu-2", body={"spec": {"unschedulable": True}})
    backend.client.request(
        "PATCH", "api/v1/nodes/gpu-0",
        body={"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                                         "message": "container runtime is down"}]}},
    )  # fmt: skip

    shown = cli("nodes")
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line for line in shown.stdout.splitlines()[1:] if line.startswith(("cpu-", "gpu-"))}
    assert "3.5/8" in rows["cpu-0"] and "9/32Gi" in rows["cpu-0"] and f"pytorchjob/{THEIRS}/bert" in rows["cpu-0"]
    assert rows["cpu-2"].split()[1] == "bad" and rows["cpu-2"].endswith("cordoned")
    assert rows["gpu-0"].split()[1] == "bad" and "NotReady" in rows["gpu-0"] and "0/1" in rows["gpu-0"]
    assert "4 nodes: 2 ready, 2 bad" in shown.stdout
    view = json.loads(cli("nodes", "--output", "json").stdout)
    cpu0 = next(n for n in view["nodes"] if n["name"] == "cpu-0")
    assert cpu0["cpu"]["requested"] == 3.5 and cpu0["pods"] == 2 and cpu0["jobs"] == [f"pytorchjob/{THEIRS}/bert"]
    assert [n["name"] for n in json.loads(cli("nodes", "--bad", "--output", "json").stdout)["nodes"]] == [
        "cpu-2",
        "gpu-0",
    ]

    # the console's first read: the nodes alone first (room, state, trouble), handed over before the pods are
    # asked for, their pods' figures "?", then all
    def pods_listed() -> list:
        return [r for r in list(kube_api.emulator) if r.url.path == "/api/v1/pods"]

    before = len(pods_listed())
    seen: list[tuple[NodesView, int]] = []
    whole = backend.nodes_view(early=lambda view: seen.append((view, len(pods_listed()) - before)))
    early, listed_by_then = seen[0]
    assert len(seen) == 1 and listed_by_then == 0 and len(pods_listed()) > before
    assert not early.pods_read and whole.pods_read
    assert [n.name for n in early.nodes] == [n.name for n in whole.nodes] and early.nodes[0].trouble
    cells = dict(zip([n.name for n in early.nodes], node_cells(early), strict=True))
    assert cells["cpu-0"][2:7] == ("?/8", "?/32Gi", "-", "?", "?") and cells["cpu-2"][7] == "cordoned"
    # a list asks for gzip (as client-go does), on the client's SDK path too, which GETs take once it has written
    assert backend.client._api is not None and "gzip" in pods_listed()[-1].headers.get("Accept-Encoding", "")
    assert dict(zip([n.name for n in whole.nodes], node_cells(whole), strict=True))["cpu-0"][2:6] == (
        "3.5/8", "9/32Gi", "-", "2"
    )  # fmt: skip


def test_the_console_lists_every_job_filters_them_and_shows_nodes_and_queues(kube_api, tmp_path):
    """The runs screen on a cluster: another's job beside the run, with where, queue and by; ``/``
    keeps the user's own; enter on another's job opens the monitor read-only, whose stop refuses;
    ``m`` shows the nodes and ``w`` the queues (Kueue not installed here: said)."""
    import asyncio

    from textual.widgets import Input, Static
    from tui_support import wait_for

    from torchdeck.settings import Settings
    from torchdeck.tui.app import make_app
    from torchdeck.tui.screens.board import NodesScreen, QueuesScreen
    from torchdeck.tui.screens.home import HomeScreen
    from torchdeck.tui.screens.monitor import MonitorScreen
    from torchdeck.tui.widgets.board_table import BoardTable

    backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(backend, cpu_nodes=2)
    run_id = backend.submit(make_spec())
    set_conditions(backend, run_id, "Created", "Running")
    job = their_job(backend)
    ref = f"pytorchjob/{THEIRS}/bert"
    pod = their_pod(backend, job, 0, "cpu-1")
    kube_api.call(kube_api.emulator.script_log, THEIRS, pod["metadata"]["name"], [metric_line(0, 5, 1.5)])
    settings = Settings(backend="kubernetes", state_dir=tmp_path / "state", refresh_hz=10)

    async def scenario():
        app = make_app(settings, backend)
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.table is not None)
            home = app.screen
            await wait_for(pilot, lambda: home.table.row_count == 2, what="the run and their job")
            assert [c.label.plain for c in home.table.columns.values()][2:5] == ["where", "queue", "by"]
            assert home._shown[ref][2:5] == (f"{THEIRS}/PyTorchJob", "-", "kubectl")
            await pilot.press("slash")
            await wait_for(pilot, lambda: isinstance(app.focused, Input), what="the filter's question")
            app.focused.value = "mine"
            await pilot.press("enter")
            await wait_for(pilot, lambda: home.table.row_count == 1, what="the filter")
            assert home.selected() == run_id
            await pilot.press("slash")
            await wait_for(pilot, lambda: isinstance(app.focused, Input))
            app.focused.value = f"ns:{THEIRS}"
            await pilot.press("enter")
            await wait_for(pilot, lambda: home.selected() == ref, what="their job alone")
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
            line = app.screen.query_one("#status-line", Static)
            await wait_for(pilot, lambda: "READ-ONLY (made by kubectl)" in str(line.render()), what="read-only")
            await pilot.press("s")
            await pilot.pause()
            assert isinstance(app.screen, MonitorScreen)  # no question: nothing to confirm
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
            await pilot.press("m")
            await wait_for(pilot, lambda: isinstance(app.screen, NodesScreen) and app.screen.reads, what="nodes")
            table = app.screen.query_one("#board-table", BoardTable)
            assert table.row_count == 2 and "2 in the cluster" in str(
                app.screen.query_one("#board-title", Static).render()
            )
            await pilot.press("escape")
            await pilot.press("w")
            await wait_for(pilot, lambda: isinstance(app.screen, QueuesScreen) and app.screen.reads, what="queues")
            assert "Kueue is not installed here" in str(app.screen.query_one("#board-summary", Static).render())
        assert backend.client.exists(api_path(api_of("PyTorchJob"), THEIRS, "bert"))

    asyncio.run(scenario())


def test_a_reference_to_a_copy_of_a_runs_labels_is_that_copy_and_nothing_of_anothers_is_changed(kube_api, tmp_path):
    """Review of issue 55: a reference resolves to a run only where it is that very object; another's
    job is never tested, model-copied, or has its pods deleted off a lost node, whatever it carries."""
    import pytest

    cli = cluster_cli(kube_api, tmp_path)
    backend = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    install(backend)
    run_id = backend.submit(make_spec())
    ours = backend.client.request("GET", api_path(api_of("PyTorchJob"), NS, run_id))
    copy = {"apiVersion": ours["apiVersion"], "kind": ours["kind"], "spec": ours["spec"],
            "metadata": {"name": run_id, "namespace": THEIRS, "labels": ours["metadata"]["labels"]}}  # fmt: skip
    backend.client.request("POST", api_path(api_of("PyTorchJob"), THEIRS), body=copy)
    ref = f"pytorchjob/{THEIRS}/{run_id}"
    said = json.loads(cli("status", ref, "--output", "json").stdout)
    assert said["run_id"] == ref and said["made_by"] == "someone else"  # the copy, not the recorded run
    for args in (("stop", ref, "--yes"), ("test", "--run", ref)):
        refused = cli(*args)
        assert refused.returncode != 0 and f"{ref} is not torchdeck's" in refused.stderr, (args, refused.stderr)
    assert backend.client.exists(api_path(api_of("PyTorchJob"), NS, run_id))
    assert backend.client.exists(api_path(api_of("PyTorchJob"), THEIRS, run_id))
    # a lost node under another's job: its pods are never deleted from here
    their = their_job(backend, "lost")
    their_pod(backend, their, 0, "cpu-0")
    fresh = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    fresh._release_lost = lambda *args: pytest.fail("released the pods of a job torchdeck did not make")  # type: ignore[method-assign]
    assert fresh.status(f"pytorchjob/{THEIRS}/lost").run_id == f"pytorchjob/{THEIRS}/lost"


def test_a_quantity_that_is_no_finite_number_is_none() -> None:
    from torchdeck.backends.kubernetes.client import quantity

    assert [quantity(q) for q in ("NaN", "1e999", "-inf", "junk", "8Gi", "500m")] == [
        0.0,
        0.0,
        0.0,
        0.0,
        8 * 2**30,
        0.5,
    ]


def test_a_big_runs_pods_asked_for_again_are_kept_by_a_watch_and_a_small_runs_are_listed(kube_api, monkeypatch):
    """A monitor asks for its run's status once a second: for a run of WATCH_FROM_PODS pods or more,
    the second ask starts a watch of its pods and the asks after read it (no LIST of them all each
    time); a change reaches the status through the watch; the watch ends once nobody asks. A run of
    two pods is listed every time, so what it says is never older than the request. Lists (the
    watch's first too) come a page at a time (here 10 pods a page)."""
    from kube_jobs import make_pod, set_phase

    from torchdeck.backends.kubernetes import client, watched

    monkeypatch.setattr(client, "LIST_PAGE", 10)

    backend = KubernetesBackend(kube_api.kubeconfig)
    install(backend)
    big = backend.submit(make_spec(name="big", nodes=watched.WATCH_FROM_PODS, nproc_per_node=1))
    small = backend.submit(make_spec(name="small", nodes=2, nproc_per_node=1))
    for i in range(watched.WATCH_FROM_PODS):
        make_pod(backend, big, f"{big}-worker-{i}", "worker", i)
    for i in range(2):
        make_pod(backend, small, f"{small}-worker-{i}", "worker", i)
    listed = []
    read_pods = backend.client.read_pods

    def counted(namespace, selector):
        listed.append(selector)
        return read_pods(namespace, selector)

    monkeypatch.setattr(backend.client, "read_pods", counted)
    watches = kube_api.emulator.watches
    for _ in range(2):
        assert len(backend.pods(big, NS)) == watched.WATCH_FROM_PODS
        assert len(backend.pods(small, NS)) == 2
    assert len(listed) == 4 and len(backend.watched.watching()) == 1
    for _ in range(3000):  # until the watch has its first listing (until then each ask lists)
        before = len(listed)
        backend.pods(big, NS)
        if len(listed) == before:
            break
        time.sleep(0.01)
    served = len(listed)
    for _ in range(5):
        assert len(backend.pods(big, NS)) == watched.WATCH_FROM_PODS
    backend.status(big)
    assert len(listed) == served and kube_api.emulator.watches == watches + 1  # one watch, and no LIST since

    set_phase(backend, f"{big}-worker-3", "Failed")
    for _ in range(3000):  # the change comes through the watch
        failed = [p.name for p in backend.pods(big, NS) if p.phase == "Failed"]
        if failed:
            break
        time.sleep(0.01)
    assert failed == [f"{big}-worker-3"] and len(listed) == served
    small_asked = sum(s.endswith(small) for s in listed)
    backend.pods(small, NS)
    assert sum(s.endswith(small) for s in listed) == small_asked + 1  # a small run is listed each time

    monkeypatch.setattr(watched, "IDLE_S", 0.0)
    backend.pods(small, NS)  # any ask ends the watches nobody asked for since
    assert backend.watched.watching() == []


def test_a_job_made_again_under_its_name_is_not_served_by_the_old_ones_watch(kube_api) -> None:
    """Another's big job, followed by its reference, is deleted and made again with its name (a
    pipeline's rerun): its new pods are read, never the old job's watch's (whose owner is gone)."""
    from torchdeck.backends.kubernetes import watched

    backend = KubernetesBackend(kube_api.kubeconfig)
    install(backend)
    ref = f"pytorchjob/{THEIRS}/bert"
    job = their_job(backend)
    for i in range(watched.WATCH_FROM_PODS):
        their_pod(backend, job, i, "cpu-0")
    for _ in range(3000):  # asked again: watched, until the watch's first listing serves it
        backend.status(ref)
        if backend.watched.watching() and len(backend.pods(ref, THEIRS)) == watched.WATCH_FROM_PODS:
            break
        time.sleep(0.01)
    path = api_path(api_of("PyTorchJob"), THEIRS, "bert")
    for i in range(watched.WATCH_FROM_PODS):
        backend.client.request("DELETE", api_path("Pod", THEIRS, f"bert-worker-{i}"))
    backend.client.request("DELETE", path)
    again = their_job(backend)
    assert again["metadata"]["uid"] != job["metadata"]["uid"]
    for i in range(3):
        their_pod(backend, again, i, "cpu-0")
    backend.status(ref)  # learns the job anew
    assert sorted(p.name for p in backend.pods(ref, THEIRS)) == [f"bert-worker-{i}" for i in range(3)]


def test_many_nodes_are_read_in_one_list_kept_a_while_and_a_new_one_is_not_taken_for_gone(kube_api, monkeypatch):
    """More than NODES_ONE_BY_ONE nodes: one LIST (a page at a time), kept NODES_LISTED_S; a node
    that joined since is listed again rather than said to be gone; a gone one is None."""
    from torchdeck.backends.kubernetes import client as client_module

    backend = KubernetesBackend(kube_api.kubeconfig)
    client = backend.client
    count = client_module.NODES_ONE_BY_ONE + 4

    def add(name):
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": {"cpu": "8"}}}
        client.request("POST", "api/v1/nodes", body=body)

    for i in range(count):
        add(f"n-{i:02d}")
    asked = []
    real_request = client.request

    def counted(method, path, **kw):
        asked.append((method, path))
        return real_request(method, path, **kw)

    monkeypatch.setattr(client, "request", counted)
    names = [f"n-{i:02d}" for i in range(count)]
    found, unread = client.nodes_named(names)
    assert sorted(found) == names and all(found.values()) and unread == []
    client.nodes_named(names)
    assert asked == [("GET", "api/v1/nodes")]  # one list, kept
    add("n-new")
    found, _ = client.nodes_named([*names, "n-new"])
    assert found["n-new"] is not None and asked[2:] == [("GET", "api/v1/nodes")]  # listed again for the name it lacked
    found, _ = client.nodes_named([*names, "n-gone"])
    assert found["n-gone"] is None and all(found[n] for n in names)


def test_an_mpijobs_launcher_a_batch_jobs_pod_is_its_mpijobs_on_the_nodes_view() -> None:
    """The MPI Operator's launcher pod is owned by a batch Job, and bears the same job-name label as a
    PyTorchJob's pods: the operator it names (as the real MPI Operator v0.8.2 and Training Operator
    label them, seen on the real cluster) says whose it is."""
    from torchdeck.backends.kubernetes.board import pod_job
    from torchdeck.backends.kubernetes.objects import Pod

    def pod(operator: str, owner: str, role: dict[str, str]) -> Pod:
        labels = {"training.kubeflow.org/job-name": "bert", "training.kubeflow.org/operator-name": operator, **role}
        owners = [{"apiVersion": "v1", "kind": owner, "name": "bert-launcher", "uid": "u1", "controller": True}]
        return Pod.from_api(
            {"metadata": {"name": "p", "namespace": "team-b", "labels": labels, "ownerReferences": owners}}
        )

    assert pod_job(pod("mpi-operator", "Job", {"training.kubeflow.org/job-role": "launcher"})) == "mpijob/team-b/bert"
    assert pod_job(pod("mpi-operator", "MPIJob", {"training.kubeflow.org/job-role": "worker"})) == "mpijob/team-b/bert"
    worker = pod("pytorchjob-controller", "PyTorchJob", {"training.kubeflow.org/replica-type": "worker"})
    assert pod_job(worker) == "pytorchjob/team-b/bert"


def test_a_list_whose_continue_token_expired_is_read_again_whole(kube_api, monkeypatch):
    """Between two pages of a list, etcd compacts the list's version away: the API server answers
    the next page 410 Expired. The list is then read again whole (as client-go's pager does), and what
    the earlier pages gave is dropped, not counted twice: the pods, the nodes view's pods and a watch's
    first listing are each the pods there are."""
    from kube_jobs import make_pod

    from torchdeck.backends.kubernetes import client
    from torchdeck.backends.kubernetes.objects import LISTED_AGAIN, Pod, PodList, read_pages

    monkeypatch.setattr(client, "LIST_PAGE", 3)
    backend = KubernetesBackend(kube_api.kubeconfig)
    install(backend)
    run = backend.submit(make_spec(name="paged", nodes=8, nproc_per_node=1))
    for i in range(8):
        make_pod(backend, run, f"{run}-worker-{i}", "worker", i)
    path = api_path("Pod", NS)

    def compacted_after_the_first_page():
        pages = backend.client.list_pages(path)
        first = next(pages)
        make_pod(backend, run, f"{run}-worker-late", "worker", 8)  # a change, then etcd compacts
        kube_api.emulator.compact()
        yield first
        yield from pages

    pages = list(compacted_after_the_first_page())
    assert len(pages) == 2 and pages[1].get(LISTED_AGAIN) and not pages[0].get(LISTED_AGAIN)
    names = sorted(p.name for p in read_pages(pages, Pod.from_api))
    assert len(names) == len(set(names)) == 9 and f"{run}-worker-late" in names
    listing = PodList.from_pages(pages)
    assert sorted(p.name for p in listing.pods) == names
    assert listing.resource_version == str(kube_api.emulator.rv)  # the whole list's, for a watch from it


def test_a_watch_connected_again_serves_its_pods_without_waiting_for_a_change(kube_api):
    """A watch's connection drops (a load balancer's idle cut): while it is down its pods are not
    served (the caller lists); once it is connected again from the version its pods are at, they are
    served again, though no pod changed since (they were not, until the next change, before)."""
    from kube_jobs import make_pod

    from torchdeck.backends.kubernetes.streams import _abort
    from torchdeck.backends.kubernetes.watched import PodWatch

    backend = KubernetesBackend(kube_api.kubeconfig)
    install(backend)
    run = backend.submit(make_spec(name="cut", nodes=3, nproc_per_node=1))
    for i in range(3):
        make_pod(backend, run, f"{run}-worker-{i}", "worker", i)
    watch = PodWatch(backend.client, NS, backend.pod_selector(run), None)
    try:
        for _ in range(3000):  # its first listing, then its watch (counted by the emulator once it serves)
            if watch.pods() is not None and watch.watcher._response is not None and kube_api.emulator.watches:
                break
            time.sleep(0.01)
        assert len(watch.pods() or []) == 3
        connected = kube_api.emulator.watches
        _abort(watch.watcher._response)
        for _ in range(3000):  # the drop is seen (its watcher retries after a backoff)
            if watch.watcher.retries:
                break
            time.sleep(0.01)
        for _ in range(3000):  # connected again: served, with no change since
            if kube_api.emulator.watches > connected and watch.pods() is not None:
                break
            time.sleep(0.01)
        assert len(watch.pods() or []) == 3
        assert kube_api.emulator.watches == connected + 1 and watch.watcher.relists == 1
    finally:
        watch.stop()
