"""The user's own code on a cluster, without an image build: the code folder
as a content-addressed bundle (a ConfigMap, or S3 on moto's server when it is
too large for one), the pods of every kind unpacking it into their working
directory (rendered manifests, checked against the operators' own CRDs), and
the ranks' text lines read back from the pod logs on kmock as live metrics."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import os
import struct
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import boto3
import pytest
from hangs import hang_script
from kube_jobs import NS, install, make_spec, run_two_pods

from torchdeck.backends import bundle
from torchdeck.backends.eks.code_store import S3CodeStore
from torchdeck.backends.errors import BackendError, SpecError
from torchdeck.backends.kubernetes.backend import KubernetesBackend
from torchdeck.backends.kubernetes.client import api_path
from torchdeck.backends.kubernetes.importing import kubelet_expand
from torchdeck.backends.kubernetes.manifests import AWS_CLI_IMAGE, PROGRAM_ANNOTATION, render
from torchdeck.backends.kubernetes.validation import validate_manifests
from torchdeck.backends.spec import KINDS
from torchdeck.cli.main import main

TRAIN = "import os\nprint(f\"step {os.environ.get('RANK')}/10 loss: 1.5\")\n"


def code_folder(tmp_path, **extra: str | bytes):
    folder = tmp_path / "code"
    (folder / "pkg").mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "requirements.txt").write_text("tqdm\n")
    (folder / ".gitignore").write_text("data/\n*.ckpt\n")
    (folder / "data").mkdir(exist_ok=True)
    (folder / "data" / "big.bin").write_bytes(b"x" * 4096)
    (folder / "last.ckpt").write_bytes(b"x")
    for name, content in extra.items():
        path = folder / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return folder


def user_spec(folder, **changes):
    entry = {"script": "train.py", "args": ["--lr", "0.1"], "code": str(folder), "requirements": "requirements.txt"}
    return make_spec(entrypoint={**entry, **changes.pop("entrypoint", {})}, **changes)


def init_containers(obj):
    """Each pod template's (role, init container names, working dir) in a rendered job."""
    spec = obj["spec"]
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs", "replicaSpecs"):
        if key in spec:
            return [
                (role, [c["name"] for c in r["template"]["spec"].get("initContainers", [])],
                 r["template"]["spec"]["containers"][0].get("workingDir"))
                for role, r in spec[key].items()
            ]  # fmt: skip
    pod = spec["template"]["spec"]
    return [("Job", [c["name"] for c in pod.get("initContainers", [])], pod["containers"][0].get("workingDir"))]


@pytest.mark.parametrize("kind", KINDS)
def test_every_kinds_pods_unpack_the_bundle_into_their_working_directory(tmp_path, kind):
    folder = code_folder(tmp_path)
    spec = user_spec(folder, cluster={"kind": kind}, metrics={"pattern": r"L=(?P<loss>[\d.]+)"})
    rendered = render(spec, "mine-1", kind)
    configmap, job = rendered.objects[0], rendered.main
    packed = rendered.bundle
    assert packed is not None and configmap["kind"] == "ConfigMap" and configmap["immutable"] is True
    assert configmap["metadata"]["name"] == packed.configmap and packed.sha256[:20] in packed.configmap
    names = tarfile.open(fileobj=io.BytesIO(base64.b64decode(configmap["binaryData"]["code.tar.gz"]))).getnames()
    relay = [
        ".torchdeck/relay.py",
        ".torchdeck/kubeflow_status.py",
        ".torchdeck/logfiles.py",
        ".torchdeck/regular_files.py",
        ".torchdeck/rewrites.py",
        ".torchdeck/textmetrics.py",
        ".torchdeck/tracebacks.py",
        ".torchdeck/triage_probe.py",
        ".torchdeck/exitmark/sitecustomize.py",
    ]  # torchdeck's relay, what it imports, what tells it the script reached its exit, the hang probe
    assert names == [
        ".gitignore",
        "pkg/__init__.py",
        "requirements.txt",
        "train.py",
        *sorted(relay),
    ]  # no data/, *.ckpt
    assert job["metadata"]["annotations"][PROGRAM_ANNOTATION] == "train.py"
    assert validate_manifests(rendered).problems == []
    text = rendered.to_yaml()
    # torchrun's prefix template, written with the kubelet's escape ($$ for $): the rank sees [rank${rank}]:
    assert "/workspace/code/train.py" in text and "[rank$${rank}]:" in text and "--tee" in text
    assert "/workspace/code/.torchdeck/relay.py" in text  # the ranks run through the relay
    if kind == "trainjob":  # its CRD keeps no init container of ours: the trainer's command unpacks first
        command = job["spec"]["trainer"]["command"]
        assert command[:2] == ["sh", "-c"] and "cd /workspace/code && exec" in command[2]
        assert packed.sha256 in command[2] and "pip install" in command[2]
        mounts = str(job["spec"]["runtimePatches"])
        assert "code-bundle" in mounts and packed.configmap in mounts
        return
    expected = ["unpack-code", "install-requirements"]
    for role, inits, workdir in init_containers(job):
        if role == "Launcher":  # mpirun's pod runs no rank
            assert inits == [] and workdir is None
            continue
        assert inits == expected and workdir == "/workspace/code", role
    if kind == "mpijob":
        launch = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"]
        assert launch[launch.index("-wdir") + 1] == "/workspace/code" and "PYTHONPATH" in launch


def test_the_init_containers_command_unpacks_and_refuses_a_changed_bundle(tmp_path):
    """The very command the pods run (``python -c``, standard library only), on this machine."""
    folder = code_folder(tmp_path)
    rendered = render(user_spec(folder), "mine-1", "pytorchjob")
    pod = rendered.main["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    unpack = next(c for c in pod["initContainers"] if c["name"] == "unpack-code")["command"]
    archive = tmp_path / "code.tar.gz"
    archive.write_bytes(rendered.bundle.data)
    dest = tmp_path / "workspace" / "code"
    done = subprocess.run([sys.executable, *unpack[1:3], str(archive), unpack[4], str(dest)], capture_output=True)
    assert done.returncode == 0, done.stderr
    assert (dest / "train.py").read_text() == TRAIN and not (dest / "data").exists()
    archive.write_bytes(rendered.bundle.data + b"tampered")
    refused = subprocess.run(
        [sys.executable, *unpack[1:3], str(archive), unpack[4], str(tmp_path / "x")], capture_output=True, text=True
    )
    assert refused.returncode == 1 and "changed on the way" in refused.stderr


def test_an_unchanged_folder_is_sent_once_and_an_edit_sends_only_the_new_bundle(kube_api, kube_backend, tmp_path):
    install(kube_backend)
    folder = code_folder(tmp_path)
    kube_backend.submit(user_spec(folder))
    packed = bundle.pack(folder, extra=bundle.relay_files())  # as the pods get it
    assert kube_backend.sent == [f"configmap {NS}/{packed.configmap}"]
    stored = kube_backend.client.request("GET", api_path("ConfigMap", NS, packed.configmap))
    assert hashlib.sha256(base64.b64decode(stored["binaryData"]["code.tar.gz"])).hexdigest() == packed.sha256
    kube_backend.submit(user_spec(folder, name="again"))
    assert kube_backend.sent == []  # the cluster has this code: nothing is sent
    (folder / "train.py").write_text(TRAIN + "print('edited')\n")
    kube_backend.submit(user_spec(folder, name="edited"))
    edited = bundle.pack(folder, extra=bundle.relay_files())
    assert edited.sha256 != packed.sha256 and kube_backend.sent == [f"configmap {NS}/{edited.configmap}"]


@pytest.mark.slow
def test_a_bundle_over_the_configmap_limit_goes_through_the_bucket(kube_api, kube_backend, tmp_path, aws_env):
    install(kube_backend)
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="models-demo")
    folder = code_folder(tmp_path, **{"weights.bin": os.urandom(1_200_000)})  # random: gzip keeps it over 1 MiB
    with pytest.raises(SpecError, match="cluster.code_bucket: .* over the 700 KiB a ConfigMap carries"):
        kube_backend.submit(user_spec(folder))
    eks_like = KubernetesBackend(kube_api.kubeconfig, code_bucket="s3://models-demo/team", code_store=S3CodeStore())
    plan = eks_like.plan(user_spec(folder))
    packed = bundle.pack(folder, extra=bundle.relay_files())
    key = f"team/code/{packed.sha256}.tar.gz"
    assert plan.code == f"s3://models-demo/{key}" and f"# your code goes to s3://models-demo/{key}" in plan.text()
    run_id = eks_like.submit(plan)  # the plan shown is what is sent: this bundle, to this key
    assert run_id == plan.run_id and eks_like.sent == [plan.code]
    assert s3.get_object(Bucket="models-demo", Key=key)["Body"].read() == packed.data
    job = eks_like.client.request("GET", f"apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/{run_id}")
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    fetch = pod["initContainers"][0]
    assert fetch["name"] == "fetch-code" and fetch["image"] == AWS_CLI_IMAGE
    assert fetch["command"][-2:] == [f"s3://models-demo/{key}", "/torchdeck-bundle/code.tar.gz"]
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-code", "unpack-code", "install-requirements"]
    assert all(
        o["kind"] != "ConfigMap"
        for o in render(user_spec(folder, cluster={"code_bucket": "s3://models-demo"}), "x-1").objects
    )
    eks_like.submit(user_spec(folder, name="again"))
    assert eks_like.sent == []  # in the bucket already
    with pytest.raises(SpecError, match="TrainJob's pods cannot fetch it from S3"):
        eks_like.submit(user_spec(folder, cluster={"kind": "trainjob"}))


def test_an_oversize_code_folder_is_one_line_and_starts_nothing(tmp_path, capsys, monkeypatch):
    folder = code_folder(tmp_path)
    with open(folder / "dataset.npy", "wb") as f:
        f.truncate(bundle.MAX_BUNDLE + 1)  # sparse: nothing is written, and nothing is read
    code = main(["render", str(folder / "train.py"), "--image", "r/t:1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "over the 64 MiB a code folder may" in err and "dataset.npy" in err and ".dockerignore" in err


PREFIXED = [
    "[rank0]:epoch 1 step 1/20 loss: 2.10",
    "[rank1]:epoch 1 step 1/20 loss: 2.20",
    "[rank0]:epoch 1 step 2/20 loss: 1.90",
    "[rank1]:epoch 1 step 2/20 loss: 2.00",
    "[rank0]:Traceback (most recent call last):",
    '[rank0]:  File "/workspace/code/train.py", line 3, in <module>',
    "[rank0]:ModuleNotFoundError: No module named 'wandb'",
]


def test_text_lines_in_the_pod_logs_become_every_ranks_metrics(kube_api, kube_backend, tmp_path):
    install(kube_backend)
    run_id = kube_backend.submit(user_spec(code_folder(tmp_path)))
    worker = [line.replace("[rank0]", "[rank2]").replace("[rank1]", "[rank3]") for line in PREFIXED[:4]]
    run_two_pods(kube_api, kube_backend, run_id, PREFIXED, worker)
    seen: list = []

    async def collect():
        async for batch in kube_backend.metrics(run_id):
            seen.extend(batch)
            if len([e for e in seen if e.event == "step"]) >= 8:
                return

    asyncio.run(asyncio.wait_for(collect(), 30))
    steps = {(e.rank, e.record["step"]): e.record["loss"] for e in seen if e.event == "step"}
    assert steps == {
        (0, 1): 2.1,
        (1, 1): 2.2,
        (0, 2): 1.9,
        (1, 2): 2.0,
        (2, 1): 2.1,
        (3, 1): 2.2,
        (2, 2): 1.9,
        (3, 2): 2.0,
    }
    assert {e.rank for e in seen if e.event == "start"} == {0, 1, 2, 3}
    assert all(e.record["total_steps"] == 20 for e in seen if e.event == "step")
    rank3 = [line for batch in kube_backend.logs(run_id, rank=3) for line in batch]
    assert [line.text for line in rank3] == ["epoch 1 step 1/20 loss: 2.20", "epoch 1 step 2/20 loss: 2.00"]
    status = kube_backend.status(run_id)
    assert (status.step, status.epoch, status.loss, status.total_steps) == (2, 1, 1.9, 20)
    assert status.reason == "rank 0: ModuleNotFoundError: No module named 'wandb' (at train.py:3)"
    assert "requirements.txt" in status.hint
    # each rank's progress from both pods' logs: the worker's ranks too
    assert [(r.rank, r.step, r.loss, r.state) for r in status.ranks] == [
        (0, 2, 1.9, "error"),
        (1, 2, 2.0, "running"),
        (2, 2, 1.9, "running"),
        (3, 2, 2.0, "running"),
    ]
    errors = [e for e in seen if e.event == "error"]
    assert [(e.rank, e.record["step"]) for e in errors] == [(0, 2)] and errors[0].record["hint"] == status.hint


@pytest.mark.slow
def test_the_bucket_must_take_the_bundle(kube_api, tmp_path, aws_env):
    kube_backend = KubernetesBackend(
        kube_api.kubeconfig, code_bucket="s3://no-such-bucket-here", code_store=S3CodeStore()
    )
    install(kube_backend)
    folder = code_folder(tmp_path, **{"weights.bin": os.urandom(1_200_000)})
    with pytest.raises(BackendError, match="cannot send the code bundle to s3://no-such-bucket-here/torchdeck/code/"):
        kube_backend.submit(user_spec(folder))
    assert kube_backend.list() == []  # nothing was applied


def test_the_eks_backend_sends_large_bundles_to_the_clusters_model_bucket(kube_api, tmp_path):
    from torchdeck.backends import open_backend
    from torchdeck.backends.eks.access import ClusterRecord, StorageChoice
    from torchdeck.settings import Settings

    state = tmp_path / "state"
    record = ClusterRecord.open(state, "demo", "us-west-2")
    record.kubeconfig, record.context, record.state = str(kube_api.kubeconfig), "kmock", "created"
    record.storage = StorageChoice("efs", "shared", "default", "torchdeck-models-demo", "demo/", "torchdeck-s3")
    record.save()
    kube_backend = open_backend("eks", Settings(state_dir=state))
    assert kube_backend.code_bucket == "s3://torchdeck-models-demo/demo"
    spec = kube_backend.with_code_bucket(user_spec(code_folder(tmp_path)))
    assert spec.cluster.code_bucket == "s3://torchdeck-models-demo/demo"
    mine = user_spec(code_folder(tmp_path), cluster={"code_bucket": "s3://mine/x"})
    assert kube_backend.with_code_bucket(mine).cluster.code_bucket == "s3://mine/x"  # the spec's own wins


@pytest.mark.parametrize("kind", ["pytorchjob", "trainjob", "job", "elasticjob"])
def test_arguments_and_environment_reach_the_pods_without_a_shell(tmp_path, kind):
    """Issue 16 (new surface): what the user passes is data in the pods, never shell text. Where a
    shell must run first (TrainJob unpacks the code in its own command), the user's words come after
    it as "$@", outside the script. The kubelet expands ``$(NAME)`` in command, args and env values
    (Kubernetes' ``third_party/forked/golang/expansion``): what the container gets is compared, the
    manifest's text expanded as the kubelet does (issue 29 row 9: ``$(HOME)`` was expanded in pods)."""
    hostile = ["--out", "$(touch /tmp/pwned)", "; rm -rf / #", "`id`", "a b"]
    spec = user_spec(code_folder(tmp_path), entrypoint={"args": hostile}, env={"TOKEN": "$(cat /etc/passwd)"})
    rendered = render(spec, "hostile", kind)
    containers = [
        c
        for obj in rendered.objects
        for c in _containers(obj)
        if c.get("name") not in ("fetch-code", "unpack-code", "install-requirements", "etcd")
        and (c.get("command") or c.get("args"))  # not a TrainJob override's env-only entry
    ]
    assert containers
    for c in containers:
        env: dict[str, str] = {}
        for e in c["env"]:
            env[e["name"]] = kubelet_expand(e["value"], env, set()) if "value" in e else ""
        words = [kubelet_expand(w, env, set()) for w in [*c.get("command", []), *c.get("args", [])]]
        assert words[-len(hostile) :] == hostile, words  # each one whole, in order, last
        if words[:2] == ["sh", "-c"]:
            assert not any(h in words[2] for h in hostile)  # the script holds none of them
        assert env["TOKEN"] == "$(cat /etc/passwd)"


def _containers(obj):
    found = []

    def walk(value):
        if isinstance(value, dict):
            if isinstance(value.get("trainer"), dict) and "command" in value["trainer"]:  # TrainJob
                found.append({"name": "trainer", **value["trainer"]})
            if isinstance(value.get("containers"), list):
                found.extend(value["containers"])
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(obj)
    return found


CHARGPT = "import torch\nimport wandb\nfrom mingpt.model import GPT\nfrom mingpt.utils import set_seed\n"


def test_a_script_inside_a_project_ships_the_project_and_runs_from_its_folder(tmp_path, monkeypatch, capsys):
    """Issue 31: minGPT's layout (setup.py at the root, the mingpt package beside projects/chargpt,
    whose script imports it), run from projects/chargpt as its README says: the bundle is rooted at
    the project, so the import resolves in the pods; the pods run in projects/chargpt; the import
    the project does not hold (wandb) and the earlier run's model.pt are named before anything is
    sent."""
    repo = tmp_path / "minGPT"
    (repo / "mingpt").mkdir(parents=True)
    (repo / "setup.py").write_text("from setuptools import setup\nsetup(name='minGPT', packages=['mingpt'])\n")
    (repo / "mingpt" / "__init__.py").write_text("")
    (repo / "mingpt" / "model.py").write_text("class GPT: pass\n")
    (repo / "mingpt" / "utils.py").write_text("def set_seed(s): pass\n")
    project = repo / "projects" / "chargpt"
    project.mkdir(parents=True)
    (project / "chargpt.py").write_text(CHARGPT)
    (project / "model.pt").write_bytes(b"\0" * (2 << 20))
    monkeypatch.chdir(project)
    assert main(["render", "chargpt.py", "--image", "r/t:1", "--output", "yaml"]) == 0
    out, err = capsys.readouterr()
    objects = [o for o in __import__("yaml").safe_load_all(out) if o]
    configmap, job = objects[0], objects[-1]
    names = tarfile.open(fileobj=io.BytesIO(base64.b64decode(configmap["binaryData"]["code.tar.gz"]))).getnames()
    assert "mingpt/model.py" in names and "projects/chargpt/chargpt.py" in names
    ((_, _, workdir),) = [r for r in init_containers(job) if r[0] == "Master"] or init_containers(job)[:1]
    assert workdir == f"{bundle.CODE_DIR}/projects/chargpt"
    assert f"{bundle.CODE_DIR}/projects/chargpt/chargpt.py" in str(job)
    assert "imports wandb, which the code folder" in out + err and "mingpt" not in (out + err).split("imports")[1][:40]
    assert "projects/chargpt/model.pt (2.0 MiB)" in out + err and "**/*.pt in .dockerignore" in out + err


RELAYED = r"""
import os, struct, sys, time
for n in range(1, 11):  # a bar redrawn in place, as tqdm draws it
    sys.stdout.write(f"\rEpoch 0: {n * 10:3d}%|##| {n}/10 [00:0{n}<00:00, 5.00it/s, loss={2 - n / 10:.2f}]")
    sys.stdout.flush()
    time.sleep(0.15)
    if n == 5:  # and a TensorBoard scalar, in the file the writer names after its process
        os.makedirs("runs/x", exist_ok=True)
        with open(f"runs/x/events.out.tfevents.1.host.{os.getpid()}.0", "wb") as f:
            f.write(bytes.fromhex(sys.argv[1]))
print()
print("done")
sys.exit(3)
"""


def _event(tag: str, step: int, value: float) -> bytes:
    value_msg = b"\x0a" + bytes([len(tag)]) + tag.encode() + b"\x15" + struct.pack("<f", value)
    summary = b"\x0a" + bytes([len(value_msg)]) + value_msg
    event = b"\x09" + struct.pack("<d", 1.7e9) + b"\x10" + bytes([step]) + b"\x2a" + bytes([len(summary)]) + summary
    return struct.pack("<Q", len(event)) + b"\0" * 4 + event + b"\0" * 4


def unpacked_in_a_bare_pod(tmp: Path, script: str) -> tuple[Path, str]:
    """``script`` as train.py in a code bundle with the relay, unpacked as a pod unpacks it, and an
    interpreter without torchdeck (as a user's image may be)."""
    folder = tmp / "code"
    folder.mkdir()
    (folder / "train.py").write_text(script)
    packed = bundle.pack(folder, extra=bundle.relay_files())
    pod = tmp / "pod"
    tarfile.open(fileobj=io.BytesIO(packed.data)).extractall(pod, filter="data")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "bare")], check=True)
    python = str(tmp / "bare" / "bin" / "python")
    assert subprocess.run([python, "-c", "import torchdeck"], capture_output=True).returncode == 1
    return pod, python


def test_the_relay_in_a_pod_puts_a_bars_redraws_and_the_loggers_scalars_in_the_log(tmp_path):
    """Issue 31, on a cluster: the pods run the user's code through the relay the bundle carries.
    Run here from an unpacked bundle with an interpreter that has no torchdeck (as a user's image
    may not), it turns the bar's redraws into lines and the TensorBoard scalar into a schema-1 line,
    which the cluster's log reader reads as rank 1's, live; the script's exit status is the pod's."""
    pod, python = unpacked_in_a_bare_pod(tmp_path, RELAYED)
    env = {"PATH": os.environ["PATH"], "RANK": "1", "LOCAL_RANK": "0", "GROUP_RANK": "0"}
    done = subprocess.run(
        [python, str(pod / ".torchdeck" / "relay.py"), "train.py", _event("train/loss", 5, 0.25).hex()],
        cwd=pod, env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stdout.decode().splitlines()
    bars = [line for line in lines if "/10 [" in line]
    assert 3 <= len(bars) <= 10 and bars[-1].startswith("Epoch 0: 100%") and "\r" not in done.stdout.decode()
    assert lines[-1] == "done" or "done" in lines
    from torchdeck.trainer.textmetrics import RankedText

    reader = RankedText(1, 2, None, "train.py")
    records = [r for line in lines for r in reader.read(0, f"[rank1]:{line}".encode())[2]]
    steps = [(r["step"], r.get("loss"), r.get("source")) for r in records if r["event"] == "step"]
    assert (5, 0.25, "logger") in steps  # the logger's point
    assert [s for s, _, source in steps if source == "text"][-1] == 10  # the bar's states, its last one
    assert all(r["rank"] == 1 for r in records)


FAILING = r"""
import os, sys
with open("attempts", "a") as f:
    f.write("x")
if sys.argv[1] == "done-then-abort":  # PyTorch's gloo threads at interpreter exit, after the work
    print("step 10/10 loss: 0.5", flush=True)
    print("terminate called without an active exception", file=sys.stderr, flush=True)
    os.abort()
if sys.argv[1] == "after-a-step":
    print("step 1/10 loss: 2.5", flush=True)
if sys.argv[1] == "silent-then-abort-in-teardown":  # Lightning's rank 1: no step printed, and gloo aborts late
    class GlooThreads:
        def __del__(self, os=os, sys=sys):
            print("terminate called without an active exception", file=sys.stderr, flush=True)
            os.abort()
    threads = GlooThreads()
    sys.exit(0)
import missing_module_of_the_user
"""


def test_the_relay_stops_a_crash_loop_under_torchrun_as_the_local_wrapper_does(tmp_path):
    """Issue 31 (fail fast), on a cluster: a rank in a pod fails before its first step with an error
    every attempt would meet. Under the real torchrun (``--max-restarts 3``), the relay ends the
    restarts after one attempt and writes why, as a schema-1 line the cluster's log reader takes as
    the rank's reason; a rank that fails after a step is restarted as torchrun is told."""
    pod, python = unpacked_in_a_bare_pod(tmp_path, FAILING)
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    env = {**os.environ, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:", "PYTHONPATH": ""}

    def run(when: str, restarts: int) -> tuple[int, str, int]:
        (pod / "attempts").unlink(missing_ok=True)
        done = subprocess.run(
            [torchrun, "--no-python", "--standalone", "--nproc-per-node", "1", "--max-restarts", str(restarts),
             "--monitor-interval", "0.1", python, str(pod / ".torchdeck" / "relay.py"), "train.py", when],
            cwd=pod, env=env, capture_output=True, timeout=120,
        )  # fmt: skip
        return done.returncode, done.stdout.decode() + done.stderr.decode(), len((pod / "attempts").read_text())

    from torchdeck.trainer.textmetrics import RankedText

    def last_error(log: str) -> str:  # as the cluster's reader takes the pod's log (torchrun's own lines too)
        reader = RankedText(1, 1, None, "train.py")
        records = [r for line in log.splitlines() for r in reader.read(0, line.encode())[2]]
        return [r["message"] for r in records if r["event"] == "error"][-1]

    code, log, attempts = run("before-a-step", 3)
    assert code != 0 and attempts == 1, log
    assert "SignalException" in log  # torchrun's own words as it stops: not taken for the reason
    assert last_error(log).startswith("ModuleNotFoundError: No module named 'missing_module_of_the_user'")
    assert "not restarted: it failed before its first step on attempt 1" in last_error(log)
    code, log, attempts = run("after-a-step", 1)
    assert code != 0 and attempts == 2 and "not restarted" not in log, log
    assert "ChildFailedError" in log and last_error(log).startswith("ModuleNotFoundError"), log
    code, log, attempts = run("done-then-abort", 2)  # done, not failed: no second attempt
    assert code == 0 and attempts == 1 and "aborted as it exited, after its work was done" in log, log
    # the image's own sitecustomize (Debian's, conda's) still runs beside the one the bundle carries
    site = next((tmp_path / "bare" / "lib").glob("python3*/site-packages"))
    (site / "sitecustomize.py").write_text("import sys\nopen('theirs-ran', 'a').write(sys.argv[0] + '\\n')\n")
    code, log, attempts = run("silent-then-abort-in-teardown", 2)  # it reached its exit: done
    assert code == 0 and attempts == 1 and "aborted as it exited" in log, log
    assert (pod / "theirs-ran").read_text().split() == [str(pod / ".torchdeck" / "relay.py"), "train.py"]


HANG = hang_script(rank=2, step=5)


def test_in_pods_each_ranks_probe_says_where_it_is_in_its_log_and_triage_reads_them(kube_api, kube_backend, tmp_path):
    """Issue 44 on a cluster: nobody can ask a rank in a pod, so its probe (carried by the bundle,
    loaded by the relay's sitecustomize) dumps by itself once its main thread has stayed on one line,
    into the rank's log. Four ranks of a real torchrun over gloo run the script through the real relay
    from an unpacked bundle, with the pods' environment as rendered (its wait shortened to 2 s);
    their log, as the master's and the worker's pods would hold it, is what `triage` reads on kmock."""
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "train.py").write_text(HANG)
    spec = user_spec(folder, entrypoint={"requirements": None})
    pod = tmp_path / "pod"
    tarfile.open(fileobj=io.BytesIO(bundle.pack(folder, extra=bundle.relay_files()).data)).extractall(
        pod, filter="data"
    )
    container = next(
        o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        for o in render(spec, "hang-1").objects
        if o["kind"] == "PyTorchJob"
    )
    probe = {e["name"]: e["value"] for e in container["env"] if e["name"].startswith(("TORCHDECK_TRIAGE", "TORCH_FR"))}
    assert probe["TORCHDECK_TRIAGE_AFTER_S"] == "60" and probe["TORCH_FR_BUFFER_SIZE"] == "256"
    # (the pod's own /tmp is its own: here the probe's folder is the test's, never a fixed name in /tmp)
    env = {**os.environ, **probe, "TORCHDECK_TRIAGE_AFTER_S": "2", "PYTHONPATH": "",
           "TORCHDECK_TRIAGE_DIR": str(tmp_path / "triage")}  # fmt: skip
    env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "[rank${rank}]:"
    log = tmp_path / "log"
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    with open(log, "wb") as out:
        ranks = subprocess.Popen(
            [torchrun, "--no-python", "--standalone", "--nproc-per-node", "4", "--tee", "3",
             sys.executable, str(pod / ".torchdeck" / "relay.py"), "train.py"],
            cwd=pod, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while log.read_bytes().count(b'"event": "triage"') < 4 and ranks.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
    finally:  # the relay runs each rank in a session of its own: its children are stopped by name
        import psutil

        left: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            left = psutil.Process(ranks.pid).children(recursive=True)
        os.killpg(ranks.pid, 9)
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        ranks.wait()
        psutil.wait_procs(left, timeout=10)
    lines = log.read_text().splitlines()
    assert sum('"event": "triage"' in line for line in lines) == 4, lines[-20:]
    install(kube_backend)
    run_id = kube_backend.submit(spec)
    master = [line for line in lines if line.startswith(("[rank0]:", "[rank1]:"))]
    worker = [line for line in lines if line.startswith(("[rank2]:", "[rank3]:"))]
    run_two_pods(kube_api, kube_backend, run_id, master, worker, worker_ended=False)

    verdict = kube_backend.triage(run_id)
    assert verdict.outliers == [2] and verdict.missing == []
    ranks_at = {r.rank: r for r in verdict.ranks}
    assert ranks_at[2].where == "train.py:10" and ranks_at[2].collective.seq == 4
    assert all(ranks_at[r].waiting_in == "all_reduce" and ranks_at[r].collective.seq == 5 for r in (0, 1, 3))
    assert verdict.summary.startswith("Rank 2 is not where the others are: it is at train.py:10")
    assert "#5 gloo:all_reduce (Float[1000])" in verdict.summary
    # kept in the state folder (as the console and the commands open the backend): status says it
    kept = KubernetesBackend(kube_api.kubeconfig, ledger_dir=tmp_path / "state")
    assert kept.status(run_id).triage is None
    assert kept.triage(run_id).summary == verdict.summary
    assert kept.status(run_id).triage.summary == verdict.summary
