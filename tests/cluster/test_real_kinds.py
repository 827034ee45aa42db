"""Issue 42: every job kind and queue torchdeck targets, run for real on the cluster of
``scripts/kube-cluster.sh``: a TrainJob through Kubeflow Trainer v2 and JobSet (with the Trainer's
own progress status), an MPIJob through the MPI Operator, an indexed Job with its headless Service,
jobs queued, admitted and preempted by Kueue, a kubeconfig whose role lacks a verb, refused before
anything is made, and a PyTorchJob made with kubectl from Kubeflow's own example, imported and
followed. Every run goes through the CLI as a user types it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import tomllib
import yaml
from real_cluster import NAMESPACE, SMALL, TRAIN, ended, launched, status_of, wait
from trainer_runs import REPO

JOB_KINDS = ("pods", "services", "configmaps", "secrets", "jobs.batch", "jobsets.jobset.x-k8s.io",
             "trainjobs.trainer.kubeflow.org", "pytorchjobs.kubeflow.org", "mpijobs.kubeflow.org",
             "workloads.kueue.x-k8s.io")  # fmt: skip


def objects_of(real_cluster, run_id: str) -> list[str]:
    """Everything in the namespace that belongs to the run: its objects by their label, and what
    the controllers made for them (JobSet's Jobs, Kueue's Workloads) by their owners."""
    found = []
    for kind in JOB_KINDS:
        for item in real_cluster.get(kind, "-n", NAMESPACE)["items"]:
            meta = item["metadata"]
            if (meta.get("labels") or {}).get("torchdeck.dev/run") == run_id or meta["name"].startswith(run_id):
                found.append(f"{kind}/{meta['name']}")
    return found


def stopped_leaves_nothing(real_cluster, on_cluster, run_id: str) -> None:
    done = on_cluster("stop", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    deadline = time.monotonic() + 180
    while left := objects_of(real_cluster, run_id):
        assert time.monotonic() < deadline, f"left 180 s after stop: {left}"
        time.sleep(2)


def test_a_trainjob_of_two_nodes_trains_through_the_real_trainer_and_jobset_and_reports_to_the_trainers_status(
    real_cluster, trainer_image, volume, on_cluster
):
    run_id = launched(on_cluster, "--kind", "trainjob", "--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2",
                      "--max-steps", "10", "--batch-size", "32", "--name", "trainjob")  # fmt: skip
    # the Trainer made a JobSet of it, and JobSet the pods, with the torch runtime's environment
    jobset = wait(lambda: real_cluster.kubectl("get", "jobset", "-n", NAMESPACE, run_id, check=False).returncode == 0,
                  "the Trainer's JobSet", 120)  # fmt: skip
    assert jobset
    pods = wait(lambda: (p := real_cluster.get("pods", "-n", NAMESPACE, "-l", f"jobset.sigs.k8s.io/jobset-name={run_id}")["items"])
                and len(p) == 2 and p, "JobSet's two pods", 180)  # fmt: skip
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"] == "2" and "KUBEFLOW_TRAINER_SERVER_URL" in env, sorted(env)
    final = ended(on_cluster, run_id)
    assert final["state"] == "succeeded", final
    assert sorted(r["rank"] for r in final["ranks"]) == [0, 1] and all(r["step"] == 10 for r in final["ranks"])
    # the progress torchdeck read is the progress the Trainer's own status shows
    trainjob = real_cluster.get("trainjob", "-n", NAMESPACE, run_id)
    progress = trainjob["status"]["trainerStatus"]
    assert progress["progressPercentage"] == 100, progress
    metrics = {m["name"]: m["value"] for m in progress["metrics"]}
    assert metrics["step"] == "10" and "loss" in metrics, metrics
    assert final["trainer_status"]["progressPercentage"] == 100, final.get("trainer_status")
    stopped_leaves_nothing(real_cluster, on_cluster, run_id)


def test_an_indexed_job_of_two_pods_trains_with_its_headless_service(real_cluster, trainer_image, volume, on_cluster):
    run_id = launched(on_cluster, "--kind", "job", "--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2",
                      "--max-steps", "8", "--batch-size", "32", "--name", "indexed")  # fmt: skip
    service = real_cluster.get("service", "-n", NAMESPACE, run_id)
    assert service["spec"]["clusterIP"] == "None"
    final = ended(on_cluster, run_id)
    assert final["state"] == "succeeded", final
    assert sorted(r["rank"] for r in final["ranks"]) == [0, 1] and all(r["step"] == 8 for r in final["ranks"])
    stopped_leaves_nothing(real_cluster, on_cluster, run_id)


def test_an_mpijob_of_two_workers_trains_through_the_real_mpi_operator(real_cluster, trainer_image, volume, on_cluster):
    """mpirun on the launcher reaches each worker's SSH server (run by the image's user, with the keys
    the operator mounts) and starts torchrun there; the two meet on worker 0."""
    run_id = launched(on_cluster, "--kind", "mpijob", "--image", trainer_image, *TRAIN, *SMALL, "--nodes", "2",
                      "--max-steps", "8", "--batch-size", "32", "--name", "mpijob")  # fmt: skip
    job = real_cluster.get("mpijob", "-n", NAMESPACE, run_id)
    assert job["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    final = ended(on_cluster, run_id)
    assert final["state"] == "succeeded", final
    assert sorted(r["rank"] for r in final["ranks"]) == [0, 1] and all(r["step"] == 8 for r in final["ranks"])
    logs = on_cluster("logs", run_id).stdout  # the launcher's mpirun carries both ranks' lines
    assert "[rank 0] epoch 1 step 8" in logs and "[rank 1] epoch 1 step 8" in logs, logs[-1500:]
    assert logs.count("Accepted publickey for trainer") == 2, logs[-1500:]  # each worker's sshd, as uid 1000
    stopped_leaves_nothing(real_cluster, on_cluster, run_id)


QUEUES = f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: e2e-flavor}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: e2e-cluster-queue}}
spec:
  namespaceSelector: {{}}
  preemption: {{withinClusterQueue: LowerPriority}}
  resourceGroups:
    - coveredResources: [cpu, memory]
      flavors:
        - name: e2e-flavor
          resources:
            - {{name: cpu, nominalQuota: "1"}}
            - {{name: memory, nominalQuota: 4Gi}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: e2e-queue, namespace: {NAMESPACE}}}
spec: {{clusterQueue: e2e-cluster-queue}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {{name: e2e-low}}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {{name: e2e-high}}
value: 1000
"""
"""A ClusterQueue with quota for one job of two 500m pods at a time, and two priorities."""


def named(real_cluster, name: str) -> list[str]:
    """The PyTorchJobs in the namespace of a run named ``name``."""
    jobs = real_cluster.get("pytorchjobs", "-n", NAMESPACE)["items"]
    return [job["metadata"]["name"] for job in jobs if job["metadata"]["name"].startswith(f"{name}-")]


def test_kueue_queues_admits_preempts_and_refuses_what_can_never_fit(real_cluster, trainer_image, volume, on_cluster):
    real_cluster.kubectl("apply", "-f", "-", input=QUEUES)
    queued = (*TRAIN, *SMALL, "--nodes", "2", "--image", trainer_image, "--queue", "e2e-queue", "--batch-size", "32")
    try:
        # a job that asks more than the queue can ever admit is refused before anything is made
        refused = on_cluster("train", "--detach", *queued, "--set", "resources.cpu=2", "--name", "huge")
        assert refused.returncode != 0
        assert "4 cpu in all, more than ClusterQueue e2e-cluster-queue can ever admit (1 cpu)" in refused.stderr
        assert not named(real_cluster, "huge")  # (the session's earlier runs stay in the namespace)
        # a low-priority job runs, checkpointing; a high-priority one takes its quota
        low = launched(on_cluster, *queued, "--max-steps", "150", "--set", "trainer.checkpoint_every=5",
                       "--set", "cluster.priority_class=e2e-low", "--name", "low")  # fmt: skip
        wait(lambda: status_of(on_cluster, low)["step"] >= 10, "the low-priority job past step 10", 600, every=2)
        high = launched(on_cluster, *queued, "--max-steps", "6", "--set", "cluster.priority_class=e2e-high",
                        "--name", "high")  # fmt: skip
        preempted = wait(lambda: (s := status_of(on_cluster, low))["state"] == "queued" and s["queue"].get("preempted")
                         and s, "Kueue to preempt the low-priority job", 180, every=2)  # fmt: skip
        assert "preempted by Kueue" in preempted["reason"], preempted
        shown = on_cluster("status", low)
        assert "preempted by Kueue" in shown.stdout, shown.stdout
        # a third job waits its turn, and says where and why
        later = launched(on_cluster, *queued, "--max-steps", "4", "--name", "later")
        waiting = wait(lambda: (s := status_of(on_cluster, later))["state"] == "queued" and s["queue"].get("reason")
                       and s["queue"].get("position") is not None and s, "the third job's place in the queue", 120)  # fmt: skip
        assert waiting["queue"]["local_queue"] == "e2e-queue", waiting
        assert waiting["queue"]["cluster_queue"] == "e2e-cluster-queue", waiting
        assert "queued in e2e-queue (ClusterQueue e2e-cluster-queue), position" in waiting["reason"], waiting
        # issue 55: the queues view says the same, in Kueue's own order, and what is ahead of it
        board = json.loads(on_cluster("queues", "--output", "json").stdout)
        (queue,) = [q for q in board["queues"] if q["name"] == "e2e-cluster-queue"]
        assert board["ordered_by"] == "Kueue's visibility API", board
        mine = [w for w in queue["waiting"] if w["job"] == later]
        assert mine and mine[0]["mine"] and mine[0]["position"] == waiting["queue"]["cluster_position"] + 1, queue
        assert f"{NAMESPACE}/e2e-queue" in queue["local_queues"] and queue["admitted"] >= 1, queue
        used = {(u["flavor"], u["resource"]): u for u in queue["usage"]}
        assert used[("e2e-flavor", "cpu")]["quota"] == 1 and used[("e2e-flavor", "cpu")]["used"] > 0, used
        said = on_cluster("queues").stdout
        assert f"your run {later}: place {mine[0]['position']} in e2e-cluster-queue" in said, said
        # the high one ends; the low one is admitted again and resumes from its checkpoint; then the third
        assert ended(on_cluster, high)["state"] == "succeeded"
        final = ended(on_cluster, low)
        assert final["state"] == "succeeded" and final["step"] == 150, final
        assert "resum" in on_cluster("logs", low).stdout.lower()
        assert ended(on_cluster, later)["state"] == "succeeded"
    finally:
        real_cluster.kubectl("delete", "pytorchjobs", "--all", "-n", NAMESPACE, "--wait=false", check=False)
        real_cluster.kubectl("delete", "-f", "-", "--wait=false", input=QUEUES, check=False)


def test_kueue_with_its_own_default_integrations_is_read_and_no_pytorchjob_runs_past_a_queue(
    real_cluster, trainer_image, volume, on_cluster
):
    """Issue 51: Kueue v0.19 as users install it (its own configuration, which leaves
    kubeflow.org/pytorchjob out). The preflight reads that configuration and refuses to send a
    PyTorchJob to a queue, before anything is made, while a TrainJob is planned through it; a
    PyTorchJob given the queue's label anyway runs at once, and status says it is not queued, never
    that Kueue admitted it."""
    real_cluster.kubectl("apply", "-f", "-", input=QUEUES)
    script = str(REPO / "scripts" / "kube-cluster.sh")
    switched = subprocess.run([script, "kueue-integrations", "default"], capture_output=True, text=True, timeout=300)
    assert switched.returncode == 0, switched.stderr
    assert "kubeflow.org/pytorchjob" not in switched.stderr and "trainer.kubeflow.org/trainjob" in switched.stderr
    queued = (*TRAIN, *SMALL, "--nodes", "2", "--image", trainer_image, "--queue", "e2e-queue", "--batch-size", "32")
    try:
        refused = on_cluster("train", "--detach", *queued, "--name", "unmanaged")
        assert refused.returncode != 0 and refused.stderr.count("\n") <= 2, refused.stderr
        assert "Kueue here does not manage kubeflow.org/pytorchjob" in refused.stderr, refused.stderr
        assert "a job sent to e2e-queue would run at once, past the quota" in refused.stderr
        assert not named(real_cluster, "unmanaged")
        planned = on_cluster("train", "--dry-run", *queued, "--kind", "trainjob", "--name", "managed")
        assert planned.returncode == 0 and "# preflight: the cluster can run it" in planned.stdout, planned.stderr

        run_id = launched(on_cluster, *TRAIN, *SMALL, "--image", trainer_image, "--max-steps", "400",
                          "--batch-size", "32", "--name", "labelled")  # fmt: skip
        real_cluster.kubectl("label", "pytorchjob", run_id, "-n", NAMESPACE, "kueue.x-k8s.io/queue-name=e2e-queue")
        status = wait(lambda: (s := status_of(on_cluster, run_id))["state"] == "running" and s["queue"] and s,
                      "the labelled run to run", 300, every=2)  # fmt: skip
        assert status["queue"]["outside"] is True and status["queue"]["admitted_at"] is None, status
        assert status["reason"] == (
            "not queued: Kueue here does not manage kubeflow.org/pytorchjob; it runs outside e2e-queue's quota"
        ), status
        assert not real_cluster.get("workloads.kueue.x-k8s.io", "-n", NAMESPACE)["items"]  # Kueue took no part
        assert on_cluster("stop", run_id).returncode == 0
    finally:
        subprocess.run([script, "kueue-integrations", "torchdeck"], capture_output=True, text=True, timeout=300)
        real_cluster.kubectl("delete", "pytorchjobs", "--all", "-n", NAMESPACE, "--wait=false", check=False)
        real_cluster.kubectl("delete", "-f", "-", "--wait=false", input=QUEUES, check=False)


def role(account: str, rules: str) -> str:
    """A service account of the namespace, bound to a Role of its own with ``rules`` (YAML)."""
    return f"""
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {account}, namespace: {NAMESPACE}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {account}, namespace: {NAMESPACE}}}
rules:
{rules}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {account}, namespace: {NAMESPACE}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {account}}}
subjects: [{{kind: ServiceAccount, name: {account}, namespace: {NAMESPACE}}}]
"""


ROLE = role(
    "limited",
    """\
  - apiGroups: [""]
    resources: [pods, pods/log, services, configmaps, events, persistentvolumeclaims, serviceaccounts]
    verbs: [get, list, watch, create, delete]
  - apiGroups: [kubeflow.org]
    resources: [pytorchjobs]
    verbs: [get, list, watch, delete]""",
)
"""A role that may do everything torchdeck does with a PyTorchJob but create one."""


def test_a_role_without_a_verb_torchdeck_needs_is_named_before_anything_is_made(
    real_cluster, trainer_image, volume, on_cluster, tmp_path
):
    real_cluster.kubectl("apply", "-f", "-", input=ROLE)
    path = kubeconfig_of(real_cluster, "limited", tmp_path)
    on_cluster.env["KUBECONFIG"] = str(path)
    done = on_cluster("train", "--detach", "--image", trainer_image, *TRAIN, *SMALL, "--name", "limited")
    assert done.returncode != 0
    first = done.stderr.strip().splitlines()[0]
    assert "may not create pytorchjobs.kubeflow.org in namespace e2e" in first, done.stderr
    assert "system:serviceaccount:e2e:limited" in first, first
    assert not real_cluster.get("pytorchjobs,services,configmaps", "-n", NAMESPACE, "-l", "torchdeck.dev/job=limited")[
        "items"
    ]


def kubeconfig_of(real_cluster, account: str, folder: Path) -> Path:
    """A kubeconfig for the service account ``account`` of the namespace (a token of its own), with
    the namespace as its context's, as a shared cluster's admin hands one to a team."""
    token = real_cluster.kubectl("create", "token", account, "-n", NAMESPACE).stdout.strip()
    admin = yaml.safe_load(real_cluster.kubeconfig.read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": admin["clusters"][0]["name"], "user": account,
                                                     "namespace": NAMESPACE}}],
        "current-context": account,
    }  # fmt: skip
    path = folder / f"{account}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


TEAM_ROLE = role(
    "team",
    """\
  - apiGroups: [""]
    resources: [pods, pods/log, services, configmaps, events, persistentvolumeclaims, serviceaccounts]
    verbs: [get, list, watch, create, delete, patch]
  - apiGroups: [batch]
    resources: [jobs]
    verbs: [get, list, watch, create, delete, patch]
  - apiGroups: [kubeflow.org]
    resources: [pytorchjobs, mpijobs]
    verbs: [get, list, watch, create, delete, patch]
  - apiGroups: [kueue.x-k8s.io]
    resources: [localqueues, workloads]
    verbs: [get, list, watch]""",
)
"""A team's rights on a shared cluster: everything in its namespace, nothing cluster-wide (no list
of nodes, namespaces, CRDs, node metrics, ClusterQueues or Kueue's configuration)."""


def test_a_user_whose_rights_end_at_one_namespace_trains_follows_stops_and_resumes(
    real_cluster, trainer_image, volume, on_cluster, tmp_path
):
    """Issue 51: with a kubeconfig bound to a Role in one namespace, ``train``, ``jobs``, ``status``,
    ``logs``, ``stop`` and ``resume`` work; what could not be seen is said in one line each (the
    jobs of other namespaces, the nodes), and the rest is done."""
    real_cluster.kubectl("apply", "-f", "-", input=TEAM_ROLE)
    on_cluster.env["KUBECONFIG"] = str(kubeconfig_of(real_cluster, "team", tmp_path))
    plan = on_cluster("train", "--dry-run", "--image", trainer_image, *TRAIN, *SMALL, "--name", "team")
    assert plan.returncode == 0 and "# preflight: the cluster can run it" in plan.stdout, plan.stdout + plan.stderr
    run_id = launched(on_cluster, "--image", trainer_image, *TRAIN, *SMALL, "--max-steps", "400",
                      "--batch-size", "32", "--set", "trainer.checkpoint_every=2", "--name", "team")  # fmt: skip
    wait(lambda: status_of(on_cluster, run_id)["step"] >= 2, "the team's run past step 2", 600, every=2)
    listed = on_cluster("jobs")
    assert listed.returncode == 0 and run_id in listed.stdout, listed.stdout + listed.stderr
    assert "torchdeck: note: may not list pytorchjobs in every namespace: those in e2e only" in listed.stderr
    nodes = on_cluster("nodes")  # issue 55: what this identity may not see is one line
    assert nodes.returncode != 0 and nodes.stderr.count("\n") == 1, nodes.stderr
    assert "may not list the cluster's nodes" in nodes.stderr, nodes.stderr
    queues = on_cluster("queues")
    assert queues.returncode == 0 and "may not list Kueue's clusterqueues" in queues.stderr, queues.stderr
    shown = on_cluster("status", run_id)
    assert shown.returncode == 0 and "found by label" not in shown.stdout, shown.stdout + shown.stderr
    logs = on_cluster("logs", run_id)
    assert logs.returncode == 0 and "step" in logs.stdout, logs.stderr
    assert on_cluster("stop", run_id).returncode == 0
    wait(lambda: not real_cluster.get("pytorchjobs", "-n", NAMESPACE, "-l", f"torchdeck.dev/run={run_id}")["items"],
         "the stopped run's job to go", 120)  # fmt: skip
    resumed = on_cluster("resume", run_id, "--detach")
    assert resumed.returncode == 0, resumed.stderr
    assert "namespace e2e, pytorchjob, service account default, claim shared" in resumed.stderr
    new_id = resumed.stdout.strip()
    final = on_cluster("stop", new_id)
    assert final.returncode == 0, final.stderr


def kubeflow_example(path: str) -> dict:
    """A file of the Training Operator's own module, at the release the cluster runs, as Go fetched it."""
    version = tomllib.loads((REPO / "manifests" / "versions.toml").read_text())["operators"]["training_operator"]
    found = subprocess.run(["go", "mod", "download", "-json", f"github.com/kubeflow/training-operator@{version}"],
                           capture_output=True, text=True, check=True, timeout=300)  # fmt: skip
    return yaml.safe_load((Path(json.loads(found.stdout)["Dir"]) / path).read_text())


def test_a_pytorchjob_made_with_kubectl_from_kubeflows_example_is_imported_and_followed_as_a_run(
    real_cluster, trainer_image, on_cluster, tmp_path
):
    job = kubeflow_example("examples/pytorch/simple.yaml")
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    # as the example is, but for what this machine cannot have: its image (no registry here: ours, loaded
    # into the node) and the script in that image (python3 SCRIPT --epochs=1: our trainer, the same way)
    for role in job["spec"]["pytorchReplicaSpecs"].values():
        container = role["template"]["spec"]["containers"][0]
        assert container["command"][:1] == ["python3"] and container["command"][-1] == "--epochs=1"
        container.update(image=trainer_image, imagePullPolicy="IfNotPresent")
        container["command"] = ["python3", "-m", "torchdeck.trainer", "--dataset", "synthetic", "--epochs=1",
                                "--max-steps", "30", "--batch-size", "16"]  # fmt: skip
    real_cluster.kubectl("delete", "pytorchjob", "-n", namespace, name, "--ignore-not-found", "--wait")
    real_cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(job))
    # issue 55: before it is imported, every view lists it as another's, and follows it read-only
    ref = f"pytorchjob/{namespace}/{name}"
    listed = on_cluster("jobs", "--namespace", namespace, "--output", "json")
    (row,) = [r for r in json.loads(listed.stdout) if r["run_id"] == ref]
    assert row["made_by"] == "kubectl" and row["kind"] == "PyTorchJob" and row["world_size"] == 2, row
    table = on_cluster("jobs", "--namespace", namespace).stdout
    assert any(line.split()[:5] == [ref, line.split()[1], f"{namespace}/PyTorchJob", "-", "kubectl"]
               for line in table.splitlines()), table  # fmt: skip
    before = real_cluster.get("pytorchjob", "-n", namespace, name)["metadata"]
    read = wait(lambda: (s := status_of(on_cluster, ref))["step"] >= 1 and s, "its steps read from its pods' logs", 600)
    assert read["run_id"] == ref and {r["rank"] for r in read["ranks"]} <= {0, 1}, read
    refused = on_cluster("stop", ref, "--yes")
    assert refused.returncode != 0 and f"{ref} is not torchdeck's" in refused.stderr, refused.stderr
    after = real_cluster.get("pytorchjob", "-n", namespace, name)["metadata"]
    assert (after.get("labels"), after.get("annotations")) == (before.get("labels"), before.get("annotations"))
    spec = tmp_path / "imported.yaml"
    done = on_cluster("import", ref, "-o", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"following {name} as run {name}" in done.stdout and "2 node(s)" in done.stdout, done.stdout
    assert yaml.safe_load(spec.read_text())["cluster"]["kind"] == "pytorchjob"
    listed = on_cluster("jobs")
    assert name in listed.stdout, listed.stdout
    final = ended(on_cluster, name, 600)
    assert final["state"] == "succeeded", final
    assert sorted(r["rank"] for r in final["ranks"]) == [0, 1] and all(r["step"] == 30 for r in final["ranks"])
    logs = on_cluster("logs", name)
    assert '"rank":0' in logs.stdout and '"rank":1' in logs.stdout, logs.stdout[-1000:]
    again = on_cluster("import", f"pytorchjob/{name}", "--namespace", namespace, "-o", str(tmp_path / "again.yaml"))
    assert again.returncode != 0 and f"is torchdeck's run {name} already" in again.stderr, again.stderr
    assert on_cluster("stop", name).returncode == 0
    wait(lambda: not real_cluster.get("pytorchjobs,pods", "-n", namespace, "-l",
                                      f"training.kubeflow.org/job-name={name}")["items"],  # fmt: skip
         "the imported job and its pods to go", 180)  # fmt: skip
