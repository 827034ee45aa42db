"""Rendering a job spec into each kind's manifests: golden files, schema
validation (Kubernetes' own for core kinds and pod templates, the operators'
own CRDs from manifests/crds/ for custom kinds, pruning included), the
fields every pod must carry, and bad specs refused with one clear line.
Regenerate the golden files after a deliberate change with
TORCHDECK_UPDATE_GOLDEN=1."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import pytest
from trainer_runs import REPO

from torchdeck.backends.errors import SpecError
from torchdeck.backends.kubernetes import crds
from torchdeck.backends.kubernetes.kinds import JOB_KINDS, MPI_SSH_DIR
from torchdeck.backends.kubernetes.manifests import RUN_LABEL, pod_selector, render
from torchdeck.backends.kubernetes.validation import validate_manifests
from torchdeck.backends.spec import KINDS, load_spec, spec_from_dict, with_overrides
from torchdeck.cli.main import main

GOLDEN = Path(__file__).parent.parent / "data" / "golden"
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
    checked = validate_manifests(render(golden_spec(), RUN, kind))
    assert checked.problems == [] and checked.cel_unchecked == 0
    assert len(checked.checked_against) == (0 if kind == "job" else 1)


def test_the_crds_are_the_operators_own_files():
    """Each CRD file is byte for byte what SOURCES.json says it is, from the operators' repositories."""
    sources = crds.sources()
    files = {p.name for p in (REPO / "manifests" / "crds").glob("*.yaml")}
    assert files == set(sources)
    for name, source in sources.items():
        data = (REPO / "manifests" / "crds" / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == source["sha256"], name
        assert source["repository"] in (
            "kubeflow/trainer",
            "kubeflow/mpi-operator",
            "pytorch/elastic",
            "kubernetes-sigs/kueue",
        )
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    for kind, targets in ((key, k.targets) for key, k in JOB_KINDS.items()):
        for target in targets:
            definition: Any = crds.crd(target.crd_file)
            assert definition["kind"] == "CustomResourceDefinition"
            assert target.version in crds.served_versions(definition)
            # the API paths (JOB_KINDS) and what is rendered name what the CRD serves
            info = JOB_KINDS[kind]
            assert (info.group, info.plural, info.kind, info.version) == (
                definition["spec"]["group"],
                definition["spec"]["names"]["plural"],
                definition["spec"]["names"]["kind"],
                target.version,
            )
            assert render(golden_spec(), RUN, kind, target).main["apiVersion"] == f"{info.group}/{target.version}"


@pytest.mark.parametrize("target", JOB_KINDS["trainjob"].targets, ids=lambda t: t.release)
def test_trainjob_carries_its_pod_settings_in_each_trainer_release(target):
    """Each release's form validates against that release's CRD with nothing pruned, and
    against no release whose CRD lacks its field (a CRD would drop it without a word)."""
    rendered = render(golden_spec(), RUN, "trainjob", target)
    assert validate_manifests(rendered).problems == []
    job = rendered.main["spec"]
    patch = job[target.pod_overrides]
    text = repr(patch)
    for wanted in ("torchdeck-shared", "'medium': 'Memory'", "torchdeck-s3", "gpu-workers", "nvidia.com/gpu"):
        assert wanted in text, (wanted, target.pod_overrides)
    assert (RUN_LABEL in text) == (target.pod_overrides != "podSpecOverrides")  # v2.0 cannot label pods
    for other in JOB_KINDS["trainjob"].targets:
        problems = crds.check(rendered.main, crds.target_schema(other)).problems
        if other.pod_overrides == target.pod_overrides:
            assert problems == []
        else:
            assert problems == [f"spec.{target.pod_overrides}: unknown field (this release of the CRD would drop it)"]
    expected = "jobset.sigs.k8s.io/jobset-name" if target.pod_overrides == "podSpecOverrides" else RUN_LABEL
    assert pod_selector(rendered.main) == f"{expected}={RUN}"


AVOIDED = ["ip-10-0-1-7.ec2.internal", "gpu-node-3"]


def avoided_in(patch: object) -> list[list[str]]:
    """Every node list a pod template's affinity keeps pods off (``metadata.name NotIn``)."""
    found: list[list[str]] = []
    if isinstance(patch, dict):
        for key, value in patch.items():
            if key == "matchFields":  # one requirement a node: the API takes one value for metadata.name
                names = [
                    v for f in value if f["key"] == "metadata.name" and f["operator"] == "NotIn" for v in f["values"]
                ]
                assert all(len(f["values"]) == 1 for f in value)
                found.append(names)
            else:
                found += avoided_in(value)
    elif isinstance(patch, list):
        for item in patch:
            found += avoided_in(item)
    return found


@pytest.mark.parametrize("kind", KINDS)
def test_avoided_nodes_keep_every_kinds_pods_off_them(kind):
    """What resume --avoid-node renders: each pod template has the affinity, and the operator's CRD takes it."""
    spec = with_overrides(golden_spec(), {"cluster.avoid_nodes": AVOIDED})
    rendered = render(spec, RUN, kind)
    assert validate_manifests(rendered).problems == []
    templates = pod_templates(rendered.main) if kind != "trainjob" else [rendered.main["spec"]]
    assert templates
    for template in templates:
        assert avoided_in(template) == [sorted(AVOIDED)]
    assert avoided_in(render(golden_spec(), RUN, kind).objects) == []


@pytest.mark.parametrize("target", JOB_KINDS["trainjob"].targets, ids=lambda t: t.release)
def test_a_trainjob_avoids_nodes_where_its_release_can_say_so(target):
    spec = with_overrides(golden_spec(), {"cluster.avoid_nodes": AVOIDED})
    if target.pod_overrides == "podSpecOverrides":  # Trainer v2.0 patches no affinity
        with pytest.raises(SpecError, match="cluster.avoid_nodes: .*cannot keep pods off nodes") as caught:
            render(spec, RUN, "trainjob", target)
        assert "v2.1" in caught.value.hint
        return
    rendered = render(spec, RUN, "trainjob", target)
    assert validate_manifests(rendered).problems == []
    assert avoided_in(rendered.main["spec"][target.pod_overrides]) == [sorted(AVOIDED)]


@pytest.mark.parametrize("kind", KINDS)
def test_efa_interfaces_are_asked_for_by_every_kinds_pods(kind):
    spec = with_overrides(golden_spec(), {"resources.efa": 4})
    rendered = render(spec, RUN, kind)
    assert validate_manifests(rendered).problems == []
    text = rendered.to_yaml()
    assert text.count("vpc.amazonaws.com/efa: '4'") >= 2  # requests and limits of each pod template
    assert "vpc.amazonaws.com/efa" not in render(golden_spec(), RUN, kind).to_yaml()


@pytest.mark.parametrize("bad", [["Not_A_Node"], "ip-10-0-1-7", [""], [7]])
def test_avoided_nodes_must_be_node_names(bad):
    with pytest.raises(SpecError, match="cluster.avoid_nodes: "):
        with_overrides(golden_spec(), {"cluster.avoid_nodes": bad})


def test_validation_names_a_misspelt_field_and_what_the_crd_refuses():
    rendered = render(golden_spec(), RUN, "pytorchjob")
    job = rendered.main
    job["spec"]["runPolicy"]["cleanPodPolcy"] = "None"
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    problems = validate_manifests(rendered).problems
    assert any("runPolicy.cleanPodPolcy: unknown field" in p for p in problems)
    assert any("containers[0].imagePullPolcy: unknown field" in p for p in problems)
    assert any("Worker.replicas: must be integer" in p for p in problems)
    assert any("Worker pod template" in p and "imagePullPolcy" in p for p in problems)  # Kubernetes' own schema too
    trainjob = render(golden_spec(), RUN, "trainjob")
    trainjob.main["metadata"]["name"] = "9lives"
    assert validate_manifests(trainjob).problems == [
        "TrainJob/9lives: (object): metadata.name must match RFC 1035 DNS label format"
    ]  # the CRD's CEL rule


def test_mpijob_keys_go_to_the_images_user_and_its_limits_are_refused():
    job = render(golden_spec(), RUN, "mpijob").main
    dockerfile = (REPO / "docker" / "Dockerfile.gpu").read_text()
    user = re.search(r"useradd --uid 1000 .*?(\S+) \\?$", dockerfile, re.M)
    assert user and job["spec"]["sshAuthMountPath"] == MPI_SSH_DIR == f"/home/{user.group(1)}/.ssh"
    for template in pod_templates(job):
        assert template["spec"]["securityContext"]["runAsUser"] == 1000
    with pytest.raises(SpecError, match="Never or OnFailure"):
        render(with_overrides(golden_spec(), {"cluster.restart_policy": "ExitCode"}), RUN, "mpijob")
    with pytest.raises(SpecError, match="an MPIJob has no elastic bounds"):
        render(with_overrides(golden_spec(), {"cluster.min_nodes": 1, "cluster.max_nodes": 2}), RUN, "mpijob")
    with pytest.raises(SpecError) as err:
        spec_from_dict({"name": "x", "cluster": {"kind": "mpijob", "restart_policy": "ExitCode"}})
    assert err.value.field == "cluster.restart_policy"


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
    elastic = render(
        with_overrides(
            golden_spec(), {"cluster.min_nodes": 1, "cluster.max_nodes": 4, "cluster.restart_policy": "ExitCode"}
        ),
        RUN,
        "pytorchjob",
    ).main
    spec = elastic["spec"]
    assert list(spec["pytorchReplicaSpecs"]) == ["Worker"] and spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert spec["elasticPolicy"] == {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 4, "maxRestarts": 2}
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    # the replica's policy alone: the operator overwrites a pod template's, warning on the job (a real one)
    assert worker["restartPolicy"] == "ExitCode" and "restartPolicy" not in worker["template"]["spec"]


def test_plain_job_meets_on_pod_zero_through_its_headless_service():
    service, job = render(golden_spec(), RUN, "job").objects
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {RUN_LABEL: RUN}
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 2
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == RUN
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["containers"][0]["env"]}
    assert env["TORCHDECK_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}  # the gate names nodes by it
    assert env["PET_RDZV_ENDPOINT"] == f"{RUN}-0.{RUN}:29400" and env["PET_NNODES"] == "2"
    assert env["NCCL_DEBUG"] == "WARN" and env["TORCHDECK_RUN_ID"] == RUN


def test_elasticjob_is_rendered_with_its_etcd_and_a_warning():
    rendered = render(golden_spec(), RUN, "elasticjob")
    assert [o["kind"] for o in rendered.objects] == ["Deployment", "Service", "NetworkPolicy", "ElasticJob"]
    assert rendered.main["spec"]["rdzvEndpoint"] == f"{RUN}-etcd:2379"
    # Issue 16 row 11: the etcd has no auth, so only its own job's pods may reach it, on 2379 only
    deployment, _, policy, job = rendered.objects
    etcd_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"] == {"matchLabels": etcd_labels} and policy["spec"]["policyTypes"] == [
        "Ingress"
    ]
    (rule,) = policy["spec"]["ingress"]
    worker_labels = job["spec"]["replicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    assert rule == {
        "from": [{"podSelector": {"matchLabels": worker_labels}}],
        "ports": [{"protocol": "TCP", "port": 2379}],
    }
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--listen-peer-urls") + 1] == "http://127.0.0.1:2380"
    assert command[command.index("--advertise-client-urls") + 1] == f"http://{RUN}-etcd:2379"
    warning = rendered.warnings[0]
    assert "v1beta1" in warning and "1.22" in warning and "cluster.min_nodes" in warning
    assert rendered.to_yaml().startswith("# warning: ElasticJob")


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"name": "CIFAR_10"}, "name", "lower-case"),
        ({"name": "9lives"}, "name", "starting with a letter"),
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
    ],
)
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
    with pytest.raises(SpecError, match="DNS-1035"):
        render(spec_from_dict({"name": "cifar10", "image": "repo/x:1"}), "9lives")


def test_numbers_are_taken_for_quantities():
    spec = with_overrides(golden_spec(), {"resources.cpu": 90, "resources.memory": 2048, "resources.shm_size": 1.5})
    assert (spec.resources.cpu, spec.resources.memory, spec.resources.shm_size) == ("90", "2048", "1.5")
    assert spec_from_dict({"name": "x", "resources": {"cpu": 0.5}}).resources.cpu == "0.5"
    requests = pod_templates(render(spec, RUN, "pytorchjob").main)[0]["spec"]["containers"][0]["resources"]["requests"]
    assert requests["cpu"] == "90"
    for bad in (-1, True, "lots"):
        with pytest.raises(SpecError, match="Kubernetes quantity"):
            spec_from_dict({"name": "x", "resources": {"cpu": bad}})


def test_render_command_prints_valid_yaml_and_one_line_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCHDECK_STATE_DIR", str(tmp_path))
    assert main(["render", str(GOLDEN / "spec.yaml"), "--kind", "job", "--validate"]) == 0
    out, err = capsys.readouterr()
    assert "kind: Job" in out and "completionMode: Indexed" in out and "2 object(s) valid" in err
    assert main(["render", str(GOLDEN / "spec.yaml"), "--kind", "trainjob", "--validate"]) == 0
    out, err = capsys.readouterr()
    assert "runtimePatches:" in out and "(against TrainJob: Kubeflow Trainer v2.3.0 (kubeflow/trainer@" in err
    assert main(["render", str(GOLDEN / "spec.yaml"), "--kind", "tfjob"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cluster.kind: must be one of" in err


def all_pod_specs() -> list[tuple[str, dict]]:
    """Every pod torchdeck renders: each kind's replicas (with the code bundle's init containers),
    the ElasticJob's etcd, the task pods, the Kaniko build."""
    from torchdeck.backends.eks.image_kaniko import render_kaniko
    from torchdeck.backends.eks.image_plan import ImagePlan
    from torchdeck.backends.kubernetes.manifests import TASKS, render_task

    found = []
    for kind in KINDS:
        for obj in render(golden_spec(), RUN, kind).objects:
            found += [(f"{kind}/{obj['kind']}", t["spec"]) for t in pod_templates(obj) if "spec" in t]
    for task in TASKS:
        (job,) = [
            o
            for o in render_task(golden_spec(), task, f"{RUN}-{task}", model_file="/data/m.pt").objects
            if o["kind"] == "Job"
        ]
        task_job: Any = job
        found.append((f"task/{task}", task_job["spec"]["template"]["spec"]))
    kaniko: list[Any] = render_kaniko(ImagePlan("demo", "us-east-1"), "torchdeck-build-x", "s3://b/ctx.tar.gz", "r/x:t")
    found += [("kaniko", o["spec"]["template"]["spec"]) for o in kaniko if o["kind"] == "Job"]
    return found


def test_no_pod_mounts_a_kubernetes_api_token_and_every_chosen_image_is_pinned():
    """Issue 16 row 11: no training, task, etcd or build pod needs the Kubernetes API (IRSA's token
    is its own projected volume), and every image torchdeck chooses is pinned by digest."""
    from torchdeck.backends.eks.image_plan import KANIKO_IMAGE
    from torchdeck.backends.kubernetes.kinds import ETCD_IMAGE
    from torchdeck.backends.kubernetes.manifests import AWS_CLI_IMAGE

    pods = all_pod_specs()
    assert len(pods) == 11 and any(name == "kaniko" for name, _ in pods), [name for name, _ in pods]
    assert [name for name, pod in pods if pod.get("automountServiceAccountToken") is not False] == []
    for image in (KANIKO_IMAGE, AWS_CLI_IMAGE, ETCD_IMAGE):
        assert re.search(r"@sha256:[0-9a-f]{64}$", image), image
    chosen = {c["image"] for _, pod in pods for c in pod.get("containers", []) + pod.get("initContainers", [])}
    assert {KANIKO_IMAGE, ETCD_IMAGE} <= chosen


def test_the_kaniko_pod_runs_with_only_the_capabilities_a_build_needs():
    """Issue 16 row 11: Kaniko runs as root (it unpacks image filesystems), so it gets a seccomp
    profile, no privilege escalation and a named set of capabilities instead of the default ones."""
    ((_, pod),) = [p for p in all_pod_specs() if p[0] == "kaniko"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    context = pod["containers"][0]["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"]
    assert set(context["capabilities"]["add"]) <= {
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "SETGID",
        "SETUID",
        "SETFCAP",
    }
