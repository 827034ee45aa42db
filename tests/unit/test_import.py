"""``torchdeck import``: manifests written elsewhere (the operators' and
TorchElastic's own examples, recorded with their commits in
tests/data/imports/SOURCES.json, and a workshop-shaped indexed Job written
here) become job specs that render again, with a line for what did not come
along; torchdeck's own rendering of each kind imports back to the same job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from torchdeck.backends.errors import SpecError
from torchdeck.backends.kubernetes.importing import import_manifest
from torchdeck.backends.kubernetes.manifests import render
from torchdeck.backends.spec import KINDS, load_spec, spec_from_dict
from torchdeck.cli.main import main

IMPORTS = Path(__file__).parent.parent / "data" / "imports"


def imported(name: str):
    return import_manifest((IMPORTS / name).read_text(), name)


def test_the_manifests_are_recorded_with_where_they_come_from():
    sources = json.loads((IMPORTS / "SOURCES.json").read_text())
    assert sorted(sources) == sorted(p.name for p in IMPORTS.glob("*.yaml"))


def test_the_torchelastic_example_becomes_an_elastic_pytorchjob_running_the_images_script():
    found = imported("elasticjob-imagenet.yaml")
    s = found.spec
    assert (s.name, s.namespace, s.image) == ("imagenet", "elastic-job", "torchelastic/examples:0.2.0rc0")
    assert (s.nodes, s.nproc_per_node, s.resources.gpus) == (2, 4, 4)
    assert (s.cluster.kind, s.cluster.min_nodes, s.cluster.max_nodes) == ("pytorchjob", 1, 2)
    assert (s.entrypoint.in_image, s.entrypoint.script) == ("/workspace/examples/imagenet", "main.py")
    assert s.entrypoint.args == ["--arch=resnet18", "--epochs=20", "--batch-size=32", "--workers=0",
                                 "/workspace/data/tiny-imagenet-200"]  # fmt: skip
    assert any("elastic PyTorchJob" in n for n in found.notes)
    pod = render(s, "imagenet-1").main["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "initContainers" not in pod  # the code is in the image: no bundle
    assert pod["containers"][0]["args"][-6:-5] == ["/workspace/examples/imagenet/main.py"]
    assert pod["containers"][0]["workingDir"] == "/workspace/examples/imagenet"


def test_the_training_operators_example_runs_python_without_torchrun():
    found = imported("pytorchjob-simple.yaml")
    s = found.spec
    assert (s.nodes, s.nproc_per_node, s.cluster.kind) == (2, 1, "pytorchjob")
    assert (s.entrypoint.in_image, s.entrypoint.script, s.entrypoint.args) == (
        "/opt/mnist/src",
        "mnist.py",
        ["--epochs=1"],
    )
    assert any("without torchrun" in n for n in found.notes)


def test_a_workshop_job_keeps_its_volume_placement_and_account_and_names_the_rest():
    found = imported("job-workshop.yaml")
    s = found.spec
    assert (s.nodes, s.nproc_per_node, s.max_restarts, s.cluster.kind) == (3, 1, 2, "job")
    assert (s.cluster.pvc, s.cluster.mount_path, s.cluster.service_account) == ("efs-pvc", "/efs-shared", "s3-access")
    assert s.cluster.node_selector == {"node.kubernetes.io/instance-type": "g5.xlarge"}
    assert (s.resources.cpu, s.resources.memory, s.resources.gpus, s.resources.shm_size) == ("3", "12Gi", 1, "8Gi")
    assert s.env == {"NCCL_DEBUG": "INFO"} and s.cluster.backoff_limit == 2
    assert (s.entrypoint.in_image, s.entrypoint.script) == ("/workspace", "cifar10-model-train.py")
    notes = "\n".join(found.notes)
    for words in ("Service cifar10-train", "--rdzv-endpoint", "toleration dedicated", "env BUCKET",
                  "volume cache (hostPath at /cache)"):  # fmt: skip
        assert words in notes


def test_an_mpijob_that_runs_no_python_is_one_clear_line(tmp_path, capsys):
    with pytest.raises(SpecError, match=r"runs 'mpirun -n 2 /home/mpiuser/pi', not a Python program or torchrun"):
        imported("mpijob-pi.yaml")
    assert main(["import", str(IMPORTS / "mpijob-pi.yaml"), "-o", str(tmp_path / "t.yaml")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1 and not (tmp_path / "t.yaml").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_torchdecks_own_rendering_imports_back_to_the_same_job(tmp_path, kind):
    (tmp_path / "train.py").write_text("print('loss: 1')\n")
    spec = spec_from_dict({
        "name": "mine", "image": "r/t:1", "nodes": 2, "nproc_per_node": 3, "namespace": "team",
        "resources": {"cpu": "4", "memory": "8Gi"},
        "cluster": {"kind": kind, "pvc": "shared", "service_account": "s3", "node_selector": {"pool": "cpu"},
                    "avoid_nodes": ["ip-10-0-1-7.ec2.internal", "ip-10-0-1-8.ec2.internal"], "node_loss": 7},
        "entrypoint": {"script": "train.py", "args": ["--lr", "0.1"], "code": str(tmp_path)},
    })  # fmt: skip
    text = render(spec, "mine-1", kind).to_yaml()
    if kind == "trainjob":
        with pytest.raises(SpecError, match="holds no PyTorchJob, ElasticJob, MPIJob or Job"):
            import_manifest(text)
        return
    imported = import_manifest(text)
    back = imported.spec
    assert (back.name, back.namespace, back.image, back.nodes, back.nproc_per_node) == ("mine-1", "team", "r/t:1", 2, 3)
    # the nodes it avoids come back beside the one-a-node spread torchdeck renders by itself
    assert back.cluster.avoid_nodes == ["ip-10-0-1-7.ec2.internal", "ip-10-0-1-8.ec2.internal"]
    assert not any(note.startswith(("affinity", "toleration")) for note in imported.notes), imported.notes
    assert back.cluster.node_loss == 7  # the lost node's two taints, tolerated for its seconds
    assert (back.entrypoint.in_image, back.entrypoint.script) == ("/workspace/code", "train.py")
    assert back.entrypoint.args == ["--lr", "0.1"]
    assert (back.cluster.pvc, back.cluster.service_account, back.cluster.node_selector) == (
        "shared",
        "s3",
        {"pool": "cpu"},
    )
    assert back.cluster.kind == ("pytorchjob" if kind == "elasticjob" else kind)


def test_the_command_writes_a_spec_that_loads_and_keeps_an_existing_one(tmp_path, capsys):
    out = tmp_path / "torchdeck.yaml"
    assert main(["import", str(IMPORTS / "job-workshop.yaml"), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "wrote" in printed and "note: volume cache" in printed
    assert load_spec(out).entrypoint.script == "cifar10-model-train.py"
    before = out.read_text()
    assert main(["import", str(IMPORTS / "elasticjob-imagenet.yaml"), "-o", str(out)]) == 1
    assert "exists; pass --force" in capsys.readouterr().err and out.read_text() == before
    (tmp_path / "bad.yaml").write_text("kind: [unclosed")
    assert main(["import", str(tmp_path / "bad.yaml"), "-o", str(tmp_path / "x.yaml")]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert yaml.safe_load(before)["cluster"]["pvc"] == "efs-pvc"


def test_a_manifest_with_aliases_is_refused_in_one_line():
    text = (IMPORTS / "pytorchjob-simple.yaml").read_text().replace("replicas: 1", "replicas: &one 1", 1)
    text = text.replace("replicas: 1", "replicas: *one")
    with pytest.raises(SpecError, match=r"not valid YAML: line [0-9]+: YAML aliases \(\*name\) are not taken here"):
        import_manifest(text, "job.yaml")


@pytest.mark.parametrize(
    "seconds,node_loss", [((30, 30), 30), ((10, 20), None), ((30, None), None)], ids=["same", "differ", "one"]
)
def test_a_lost_nodes_taints_tolerated_for_the_same_seconds_become_node_loss_and_others_a_note(seconds, node_loss):
    """An upstream example with its own tolerations: the two a lost node gets (unreachable and
    not-ready) for the same seconds are ``cluster.node_loss``; anything else is named as left out."""
    job = yaml.safe_load((IMPORTS / "pytorchjob-simple.yaml").read_text())
    taints = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
    tolerations = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", **({"tolerationSeconds": s} if s is not None else {})}
        for key, s in zip(taints, seconds)
    ]
    for role in job["spec"]["pytorchReplicaSpecs"].values():
        role["template"]["spec"]["tolerations"] = [dict(t) for t in tolerations]
    found = import_manifest(json.dumps(job), "with-tolerations.yaml")
    assert found.spec.cluster.node_loss == node_loss
    left_out = [n for n in found.notes if n.startswith("toleration node.kubernetes.io/")]
    assert len(left_out) == (0 if node_loss is not None else 2), found.notes
