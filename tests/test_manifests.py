"""Rendering a job spec into each kind's manifests: golden files, schema
validation (Kubernetes' own for core kinds and pod templates, the operators'
for custom kinds), the fields every pod must carry, and bad specs refused
with one clear line. Regenerate the golden files after a deliberate change
with TORCHDECK_UPDATE_GOLDEN=1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchdeck.backends.errors import SpecError
from torchdeck.backends.manifest_validation import validate_manifests
from torchdeck.backends.manifests import RUN_LABEL, render
from torchdeck.backends.spec import KINDS, load_spec, spec_from_dict, with_overrides
from torchdeck.tui.cli import main

GOLDEN = Path(__file__).parent / "data" / "golden"
RUN = "cifar10-1122-0700"


def golden_spec():
    return load_spec(GOLDEN / "spec.yaml")


def pod_templates(obj: dict) -> list[dict]:
    """The pod templates inside one object, whatever its kind."""
    spec = obj["spec"]
    for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs", "replicaSpecs"):
        if key in spec:
            return [r["template"] for r in spec[key].values()]
    return [spec["template"]] if "template" in spec else []


@pytest.mark.parametrize("kind", KINDS)
def test_rendering_matches_the_golden_file(kind):
    text = render(golden_spec(), RUN, kind).to_yaml()
    path = GOLDEN / f"{kind}.yaml"
    if os.environ.get("TORCHDECK_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{kind} rendering changed; review it, then TORCHDECK_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_passes_its_schemas(kind):
    assert validate_manifests(render(golden_spec(), RUN, kind)) == []


def test_validation_names_a_misspelt_field_and_a_bad_value():
    rendered = render(golden_spec(), RUN, "pytorchjob")
    job = rendered.main
    job["spec"]["runPolicy"]["cleanPodPolicy"] = "Sometimes"
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    problems = validate_manifests(rendered)
    assert len(problems) == 2
    assert "runPolicy.cleanPodPolicy" in problems[0] and "'Sometimes'" in problems[0]
    assert "Worker pod template" in problems[1] and "imagePullPolcy" in problems[1]


@pytest.mark.parametrize("kind", ["pytorchjob", "mpijob", "job", "elasticjob"])
def test_every_training_pod_carries_what_the_cluster_needs(kind):
    rendered = render(golden_spec(), RUN, kind)
    templates = pod_templates(rendered.main)
    assert templates
    for template in templates:
        assert template["metadata"]["labels"][RUN_LABEL] == RUN
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["serviceAccountName"] == "torchdeck-s3"
        assert pod["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "gpu-workers"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
        assert volumes["shared"]["persistentVolumeClaim"] == {"claimName": "torchdeck-shared"}
        (container,) = pod["containers"]
        assert container["image"].endswith("@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["readOnlyRootFilesystem"] is True
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/dev/shm", "/tmp", "/shared"} <= mounts  # /tmp: the writable scratch
        if container["name"] in ("launcher",):
            continue
        resources = container["resources"]
        assert resources["requests"] == {"cpu": "7", "memory": "28Gi", "nvidia.com/gpu": "1"}
        assert resources["limits"] == {"memory": "28Gi", "nvidia.com/gpu": "1"}
    main_args = " ".join(a for t in templates for c in t["spec"]["containers"] for a in c.get("args", []))
    assert "-m torchdeck.trainer" in main_args and "--nproc-per-node 4" in main_args
    assert "--data-dir /shared/data" in main_args and "--model-file s3://torchdeck-models/cifar10/model.pt" in main_args


def test_pytorchjob_sizes_and_elastic_policy():
    fixed = render(golden_spec(), RUN, "pytorchjob").main["spec"]
    assert {k: v["replicas"] for k, v in fixed["pytorchReplicaSpecs"].items()} == {"Master": 1, "Worker": 1}
    assert fixed["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["name"] == "pytorch"
    assert fixed["nprocPerNode"] == "4" and "elasticPolicy" not in fixed
    elastic = render(with_overrides(golden_spec(), {"cluster.min_nodes": 1, "cluster.max_nodes": 4,
                                                    "cluster.restart_policy": "ExitCode"}), RUN, "pytorchjob").main
    spec = elastic["spec"]
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"] and spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert spec["elasticPolicy"] == {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 4, "maxRestarts": 2}
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "ExitCode" and worker["template"]["spec"]["restartPolicy"] == "Never"


def test_plain_job_meets_on_pod_zero_through_its_headless_service():
    service, job = render(golden_spec(), RUN, "job").objects
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {RUN_LABEL: RUN}
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 2
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == RUN
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["PET_RDZV_ENDPOINT"] == f"{RUN}-0.{RUN}:29400" and env["PET_NNODES"] == "2"
    assert env["NCCL_DEBUG"] == "WARN" and env["TORCHDECK_RUN_ID"] == RUN


def test_elasticjob_is_rendered_with_its_etcd_and_a_warning():
    rendered = render(golden_spec(), RUN, "elasticjob")
    assert [o["kind"] for o in rendered.objects] == ["Deployment", "Service", "ElasticJob"]
    assert rendered.main["spec"]["rdzvEndpoint"] == f"{RUN}-etcd:2379"
    assert any("unmaintained" in w for w in rendered.warnings)
    assert rendered.to_yaml().startswith("# warning: ElasticJob")


@pytest.mark.parametrize("change, field, words", [
    ({"name": "CIFAR_10"}, "name", "lower-case"),
    ({"namespace": "Training"}, "namespace", "lower-case"),
    ({"nodes": 0}, "nodes", ">= 1"),
    ({"nproc_per_node": 0}, "nproc_per_node", ">= 1"),
    ({"cluster": {"min_nodes": 4, "max_nodes": 2}}, "cluster.min_nodes", "more than cluster.max_nodes"),
    ({"cluster": {"min_nodes": 1}}, "cluster.max_nodes", "must be set with the other"),
    ({"cluster": {"min_nodes": 3, "max_nodes": 4}}, "nodes", "outside"),
    ({"device": "cpu", "resources": {"gpus": 1}}, "resources.gpus", "device: cpu"),
    ({"cluster": {"pvc": "Shared_Data"}}, "cluster.pvc", "DNS-1123"),
    ({"cluster": {"node_selector": {"bad key!": "x"}}}, "cluster.node_selector", "not a valid label name"),
    ({"cluster": {"kind": "tfjob"}}, "cluster.kind", "must be one of"),
    ({"image": "https://repo/x:1"}, "image", "image reference"),
])
def test_bad_cluster_specs_are_refused_with_one_line(change, field, words):
    data = {"name": "cifar10", "nodes": 2, "image": "repo/x:1", **change}
    with pytest.raises(SpecError) as err:
        spec_from_dict(data, "t.yaml")
    assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)


def test_render_needs_an_image_and_a_short_enough_name():
    with pytest.raises(SpecError, match="needs a training image"):
        render(spec_from_dict({"name": "cifar10"}), RUN)
    with pytest.raises(SpecError, match="at most 52"):
        render(spec_from_dict({"name": "cifar10", "image": "repo/x:1"}), "x" * 60)


def test_render_command_prints_valid_yaml_and_one_line_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCHDECK_STATE_DIR", str(tmp_path))
    assert main(["render", str(GOLDEN / "spec.yaml"), "--kind", "job", "--validate"]) == 0
    out, err = capsys.readouterr()
    assert "kind: Job" in out and "completionMode: Indexed" in out and "2 object(s) valid" in err
    assert main(["render", str(GOLDEN / "spec.yaml"), "--kind", "tfjob"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cluster.kind: must be one of" in err
