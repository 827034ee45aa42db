"""The real cluster's tool (scripts/cluster/kubecluster) without a cluster: its config files written
from data read back as the data, the releases read from manifests/versions.toml, the nodes as values,
its records of what it started."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "cluster"))

from kubecluster.api import json_stream, outside_service  # noqa: E402
from kubecluster.components import KUEUE_FRAMEWORKS, pytorch_init_container  # noqa: E402
from kubecluster.formats import corefile_text, toml_text, yaml_text  # noqa: E402
from kubecluster.layout import Cluster, Programs, default_nodes  # noqa: E402
from kubecluster.node import containerd_config, kube_proxy_config, kubelet_config  # noqa: E402
from kubecluster.owned import mounts_since, owned_pid, remember_pid  # noqa: E402
from kubecluster.versions import read_versions  # noqa: E402


def cluster(tmp_path: Path, nodes: int = 1) -> Cluster:
    state = tmp_path / "state"
    return Cluster(Programs(tmp_path / "cache", read_versions()), state=state,
                   nodes=default_nodes(state, tmp_path / "cache", nodes))  # fmt: skip


def test_the_config_files_read_back_as_the_data_they_were_written_from(tmp_path):
    made = cluster(tmp_path)
    node = made.control
    containerd = containerd_config(made, node)
    assert tomllib.loads(toml_text(containerd)) == containerd
    for config in (kubelet_config(made, node), kube_proxy_config(made, node), pytorch_init_container()):
        assert yaml.safe_load(yaml_text(config)) == config
    tricky = {"a key": ['quote " and \\ and \n newline', "{{.MasterAddr}}", True, None, 3], "nested": {}}
    assert yaml.safe_load(yaml_text(tricky)) == tricky
    assert tomllib.loads(toml_text({"t": {"a.b": "x'y\"z"}})) == {"t": {"a.b": "x'y\"z"}}
    assert corefile_text((".:53", ["errors", ("kubernetes cluster.local", ["pods insecure"])])) == (
        ".:53 {\n    errors\n    kubernetes cluster.local {\n        pods insecure\n    }\n}\n"
    )


def test_the_releases_are_the_ones_versions_toml_declares():
    declared = tomllib.loads((REPO / "manifests" / "versions.toml").read_text())
    versions = read_versions()
    for table in declared.values():
        for name, version in table.items():
            assert getattr(versions, name) == version


def test_the_kubernetes_go_builds_is_the_release_versions_toml_declares():
    from kubecluster.build import kube_module_version

    assert kube_module_version() == read_versions().kubernetes
    go_mod = (REPO / "scripts" / "cluster" / "kube" / "go.mod").read_text()
    # the staging modules Kubernetes replaces with its own tree follow its minor release
    minor = read_versions().kubernetes.replace("v1.", "v0.")
    assert f"k8s.io/client-go {minor}" in go_mod and f"k8s.io/api {minor}" in go_mod


def test_nodes_are_values_of_their_own_and_the_first_keeps_the_single_node_names(tmp_path):
    made = cluster(tmp_path, nodes=3)
    names = made.component_names()
    assert len(names) == len(set(names))
    assert {"kubelet", "containerd", "kube-proxy", "kubelet-2", "kubelet-3"} <= set(names)
    assert len({n.ip for n in made.nodes}) == len({n.containerd_root for n in made.nodes}) == 3
    assert made.control.containerd_root == tmp_path / "cache" / "containerd-root"
    assert made.programs.kube_bin.parent.name.startswith(f"kubernetes-{read_versions().kubernetes}-")
    # each node a machine of its own: its namespaces, cgroup subtree, fabric address, EKS's names
    assert len({n.netns for n in made.nodes}) == len({n.cgroup for n in made.nodes}) == 3
    assert len({n.fabric_ip for n in made.nodes} - {""}) == 3 and made.control.name == "torchdeck-node"
    assert [n.name for n in made.workers] == ["ip-10-244-1-1.ec2.internal", "ip-10-244-2-1.ec2.internal"]
    assert {n.labels["topology.kubernetes.io/zone"] for n in made.workers} == {"us-east-1a", "us-east-1b"}
    assert made.node("2") is made.node("ip-10-244-1-1.ec2.internal") is made.nodes[1]
    config = kubelet_config(made, made.control)
    assert config["registerWithTaints"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert kubelet_config(made, made.nodes[1])["cgroupRoot"] == "/torchdeck-kube/node-2"
    single = cluster(tmp_path)
    assert single.workers == single.nodes and kubelet_config(single, single.control)["registerWithTaints"] == []


def test_a_fault_names_a_node_there_is_and_spares_the_control_plane(tmp_path):
    from kubecluster.faults import fault
    from kubecluster.processes import NoCluster

    made = cluster(tmp_path, nodes=3)
    with pytest.raises(ValueError, match=r"no node gpu-7 \(the nodes: torchdeck-node, ip-10-244-1-1"):
        fault(made, "gpu-7", "crash", [])
    with pytest.raises(NoCluster, match="runs the control plane"):
        fault(made, "torchdeck-node", "crash", [])
    assert not fault(made, "2", "explode", []) and not fault(made, "2", "slow", ["lots"])
    assert not fault(made, "2", "slow", ["5"])  # under the kernel's least quota a slice
    assert not fault(made, "2", "crash", ["now"])


def test_the_node_count_is_the_running_clusters_else_the_environments(tmp_path, monkeypatch):
    from kubecluster.layout import NODES_FILE, node_count

    monkeypatch.setenv("TORCHDECK_KUBE_NODES", "3")
    assert node_count(tmp_path) == 3
    (tmp_path / NODES_FILE).write_text("2\n")
    assert node_count(tmp_path) == 2
    (tmp_path / NODES_FILE).unlink()
    monkeypatch.setenv("TORCHDECK_KUBE_NODES", "many")
    with pytest.raises(ValueError, match="a node count from 1 to 8"):
        node_count(tmp_path)


def test_kueue_runs_with_the_integrations_the_kueue_tests_expect():
    sys.path.insert(0, str(REPO / "tests" / "kube"))
    from test_kueue import MANAGED

    assert KUEUE_FRAMEWORKS == MANAGED


def test_objects_are_data_and_kubectls_stream_is_read_whole():
    service, endpoints = outside_service("ns", "svc", "10.244.0.1", [(443, 9443)])
    assert service["spec"] == {"ports": [{"name": "p9443", "port": 443, "targetPort": 9443}]}
    assert endpoints["subsets"] == [{"addresses": [{"ip": "10.244.0.1"}], "ports": [{"name": "p9443", "port": 9443}]}]
    stream = '{"kind": "A"}\n{"kind": "List", "items": [{"kind": "B"}, {"kind": "C"}]}\n'
    assert [o["kind"] for o in json_stream(stream)] == ["A", "B", "C"]


def test_a_pid_is_ours_only_while_its_start_time_is_the_recorded_one(tmp_path):
    record = tmp_path / "pid"
    remember_pid(record, os.getpid())
    assert owned_pid(record) == os.getpid()
    pid, start = record.read_text().split()
    record.write_text(f"{pid} {int(start) + 1}\n")
    assert owned_pid(record) is None
    assert mounts_since(None, ["/"]) == []
    assert "/proc" in mounts_since([], ["/proc"])
