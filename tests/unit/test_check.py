"""The health gate (``trainer/check.py``, ``backends/health.py``): its sizes and nccl-tests' bus
bandwidth, the node pairs it sweeps, what it reads of DCGM and libfabric (fixtures in
tests/data/health, whose SOURCES.md says where their shapes come from), and the verdict. The sweep
itself runs under torchrun in tests/training/test_triage.py, and on a real cluster in tests/cluster."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from torchdeck.backends.base import GateStep
from torchdeck.backends.health import GateResult, gate_spec, judge, node_problems
from torchdeck.backends.spec import spec_from_dict
from torchdeck.trainer.check import GpuWatch, bus_bandwidth, efa_facts, node_pairs, parse_dcgm, parse_fi_info, sizes

DATA = Path(__file__).parent.parent / "data" / "health"


def test_sizes_grow_fourfold_from_4_kib_and_bus_bandwidth_is_nccl_tests():
    assert sizes(1 << 20) == [4096, 16384, 65536, 262144, 1048576]
    assert sizes(1000) == [1000]
    assert bus_bandwidth(10.0, 2) == 10.0 and bus_bandwidth(10.0, 4) == 15.0 and bus_bandwidth(10.0, 8) == 17.5
    assert bus_bandwidth(10.0, 1) == 10.0


def test_every_pair_of_nodes_is_swept_up_to_sixteen_nodes_then_a_ring():
    assert node_pairs(3) == [(0, 1), (0, 2), (1, 2)]
    assert len(node_pairs(16)) == 120
    assert node_pairs(17) == [(a, (a + 1) % 17) for a in range(17)]


def test_dcgm_4_output_is_read_after_checking_it_against_nvidias_own_schema():
    text = (DATA / "dcgm4-level1-fail.json").read_text()
    jsonschema.Draft7Validator(json.loads((DATA / "dcgm_diag_schema.json").read_text())).validate(json.loads(text))
    broken = json.loads(text)
    del broken["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["test_summary"]
    with pytest.raises(jsonschema.ValidationError):  # the schema holds the fixture to DCGM's shape
        jsonschema.Draft7Validator(json.loads((DATA / "dcgm_diag_schema.json").read_text())).validate(broken)
    read = parse_dcgm(text)
    assert read["results"] == 4 and read["version"] == "4.2.3"
    assert read["failed"] == [
        {"test": "memory", "gpu": "1", "warning": "Memory test failed: 2 uncorrectable ECC errors on GPU 1"}
    ]


def test_dcgm_3_output_with_its_banner_passes_and_what_is_no_json_is_said():
    read = parse_dcgm((DATA / "dcgm3-level1-pass.txt").read_text())
    assert read["failed"] == [] and read["results"] == 5 and read["version"] == "3.3.9"
    assert parse_dcgm("Error: unable to connect to host engine")["error"].startswith("dcgmi printed no JSON")
    assert "does not read" in parse_dcgm("{not json}")["error"]
    assert parse_dcgm('{"other": 1}')["error"] == "dcgmi's JSON has no diagnostic in it"


def test_efa_devices_are_counted_from_sysfs_and_fi_info(tmp_path):
    assert parse_fi_info((DATA / "fi_info-efa.txt").read_text()) == 1
    assert parse_fi_info("provider: tcp\n    fabric: 10.0.0.0/16\n") == 0
    sysfs = tmp_path / "infiniband"
    sysfs.mkdir()
    (sysfs / "rdmap0s31").mkdir()
    (sysfs / "mlx5_0").mkdir()
    assert efa_facts(sysfs)["devices"] == ["rdmap0s31"]
    assert efa_facts(tmp_path / "none")["devices"] == []


def test_without_nvml_a_node_has_no_gpu_facts_and_says_why():
    facts = GpuWatch().facts()  # this machine: no NVIDIA driver
    assert facts["count"] == 0 and facts["note"].startswith("NVML not loaded")


def judged(result, types=None):
    """``health.judge`` on the check's answer as the backends hand it over (a ``GateResult``)."""
    return judge(GateResult(result["backend"], 0, [], [], result.get("nodes", []), result.get("pairs", [])), types)


def node(name, intra=None, gpus=None, dcgm=None, efa=None):
    out = {"node": name, "host": name, "ranks": [0, 1], "intra": {"busbw_gbps": intra} if intra else None}
    return out | {"gpus": gpus or {"count": 0}, "dcgm": dcgm or {"ran": False}, "efa": efa or {"devices": []}}


def pair(a, b, busbw):
    return {"a": a, "b": b, "result": {"bytes": 16 << 20, "busbw_gbps": busbw}}


def test_a_node_in_every_slow_pair_is_the_one_named():
    result = {
        "backend": "gloo",
        "nodes": [node(n, 2.0) for n in "abcd"],
        "pairs": [pair("a", "b", 1.0), pair("a", "c", 1.1), pair("b", "c", 1.05), pair("a", "d", 0.2),
                  pair("b", "d", 0.25), pair("c", "d", 0.22)],
    }  # fmt: skip
    short = judged(result)
    assert list(short) == ["d"]
    assert short["d"].startswith("its link to a reaches 0.20 GB/s, under half the other links'")


def test_one_slow_node_of_its_own_and_its_gpu_facts_are_each_said():
    gpu = {"count": 7, "gpus": [{"index": 3, "ecc_uncorrected": 2, "retired_pages_pending": True,
                                 "nvlink_up": 10, "nvlink_down": 2}], "xids": [79]}  # fmt: skip
    dcgm = {"ran": True, "level": 1, "failed": [{"test": "memory", "gpu": "3", "warning": "2 uncorrectable"}]}
    efa = {"devices": ["rdmap0s31"]}
    eight = {"count": 8, "gpus": []}
    result = {
        "backend": "nccl",
        "nodes": [node("n1", 150.0, eight, efa=efa), node("n2", 148.0, eight, efa=efa), node("n3", 40.0, gpu, dcgm)],
    }
    short = judged(result, {"n1": "p4d.24xlarge", "n2": "p4d.24xlarge", "n3": "p4d.24xlarge"})
    assert list(short) == ["n3"]
    said = short["n3"]
    for words in (
        "7 of the 8 GPUs a p4d.24xlarge has",
        "GPU 3: 2 uncorrected ECC errors",
        "GPU 3: retired memory pages pending",
        "GPU 3: 2 of 12 NVLink links down",
        "XID errors during the check: 79",
        "DCGM level 1 memory failed on GPU 3: 2 uncorrectable",
        "no EFA device in the pod on an EFA instance (p4d.24xlarge)",
        "its own all-reduce reaches 40.00 GB/s, under half the other nodes' 149.00",
        "under 15% of its GPUs' 600 GB/s NVLink",
    ):
        assert words in said, (words, said)


def test_two_nodes_on_nccl_are_held_to_their_instance_types_line_rate():
    efa = {"devices": ["rdmap0s31"]}
    eight = {"count": 8, "gpus": []}
    nodes = [node("g1", gpus=eight, efa=efa), node("g2", gpus=eight, efa=efa)]
    slow = {"backend": "nccl", "nodes": nodes, "pairs": [pair("g1", "g2", 1.0)]}
    types = {"g1": "g5.48xlarge", "g2": "g5.48xlarge"}  # 100 Gbps: 12.5 GB/s, of which 30% is 3.75
    short = judged(slow, types)
    assert set(short) == {"g1", "g2"} and "under 30% of the 100 Gbps both have" in short["g1"]
    fine = {"backend": "nccl", "nodes": nodes, "pairs": [pair("g1", "g2", 9.0)]}
    assert judged(fine, types) == {}
    on_gloo = {"backend": "gloo", "nodes": nodes, "pairs": [pair("g1", "g2", 1.0)]}
    assert judged(on_gloo, types) == {}  # gloo on CPUs is only compared with the other nodes


def test_a_pod_that_asked_for_efa_and_sees_none_is_named_whatever_its_type():
    asked = node("e1", efa={"devices": [], "asked": 4})
    assert node_problems(asked, None) == [
        "its pod asks for 4 EFA interface(s) and sees 0: NCCL falls back to TCP sockets (check the EFA device "
        "plugin on the node, and the nodegroup's EFA interfaces)"
    ]
    assert node_problems(node("e2", efa={"devices": ["rdmap0s31"] * 4, "asked": 4}), None) == []


def test_a_node_whose_arithmetic_is_under_half_the_others_is_named_even_of_two():
    """A throttled machine (its CPU capped, a GPU clocked down): its link to the other node is as slow
    for both ends, but its own matrix products name it, against the other node where there are two."""

    def computed(name, gflops):
        return node(name) | {"compute": {"gflops": gflops, "seconds": 0.5}}

    two = {"backend": "gloo", "nodes": [computed("w1", 20.0), computed("w2", 6.0)], "pairs": [pair("w1", "w2", 0.3)]}
    assert judged(two) == {"w2": "its arithmetic reaches 6.0 GFLOP/s, under half the other node's 20.0"}
    many = {"backend": "gloo", "nodes": [computed(n, g) for n, g in (("a", 20.0), ("b", 18.0), ("c", 12.0))]}
    assert judged(many) == {}  # 12 against 19: slower, not under half


def test_a_healthy_cpu_node_says_nothing():
    assert node_problems(node("cpu-0"), "m5.xlarge") == []
    assert node_problems(node("cpu-0"), None) == []


def test_the_gate_runs_the_runs_own_image_kind_and_placement_once():
    spec = spec_from_dict(
        {
            "name": "a-rather-long-job-name-for-a-real-run-x",
            "image": "registry.example/trainer:v1",
            "nodes": 4,
            "resources": {"gpus": 8, "efa": 4},
            "entrypoint": {"script": "train.py", "args": ["--lr", "0.1"]},
            "cluster": {"kind": "mpijob", "node_selector": {"pool": "gpu"}, "queue": "team-a", "health_gate": True},
        }
    )
    gate = gate_spec(spec, GateStep(max_bytes=1 << 20, dcgm_level=2))
    assert gate.name == "a-rather-long-job-name-for-a-real-r-gate" and len(gate.name) <= 40
    assert (gate.image, gate.nodes, gate.cluster.kind, gate.cluster.queue) == (spec.image, 4, "mpijob", "team-a")
    assert gate.cluster.node_selector == {"pool": "gpu"} and not gate.cluster.health_gate
    assert gate.entrypoint.module == "torchdeck.trainer.check" and gate.entrypoint.in_image
    assert gate.entrypoint.args == ["--max-bytes", "1048576", "--dcgm-level", "2", "--efa", "4"]
    assert gate.max_restarts == 0 and gate.cluster.backoff_limit == 0


def test_the_gpu_facts_read_through_nvml_have_their_shape(monkeypatch):
    """The NVML path on a CPU machine (CI has no GPU): a stand-in with nvidia-ml-py's names and
    error type, two GPUs, the second with ECC errors, a retired page pending, one NVLink link of
    three down, and an XID 79 raised while the check ran. Shape only: real NVML has not run it here."""
    import sys
    import types

    class NVMLError(Exception):
        pass

    xids = [79]

    def wait(events, timeout):
        if not xids:
            raise NVMLError("Timeout")
        return types.SimpleNamespace(eventData=xids.pop())

    def link_state(handle, link):
        if link >= 3:
            raise NVMLError("Not Supported")
        return 0 if (handle == 1 and link == 2) else 1

    fake = types.SimpleNamespace(
        NVMLError=NVMLError,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        NVML_NVLINK_MAX_LINKS=18,
        nvmlEventTypeXidCriticalError=8,
        nvmlInit=lambda: None,
        nvmlEventSetCreate=lambda: "events",
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceRegisterEvents=lambda handle, kinds, events: None,
        nvmlDeviceGetName=lambda handle: b"NVIDIA A100-SXM4-40GB",
        nvmlDeviceGetTotalEccErrors=lambda handle, kind, counter: 3 if handle == 1 else 0,
        nvmlDeviceGetRetiredPagesPendingStatus=lambda handle: int(handle == 1),
        nvmlDeviceGetNvLinkState=link_state,
        nvmlEventSetWait=wait,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    facts = GpuWatch().facts()
    assert facts["count"] == 2 and facts["xids"] == [79] and facts["xid_watch"]
    assert facts["gpus"][0] == {"index": 0, "name": "NVIDIA A100-SXM4-40GB", "ecc_uncorrected": 0,
                                "retired_pages_pending": False, "nvlink_up": 3, "nvlink_down": 0}  # fmt: skip
    assert facts["gpus"][1]["ecc_uncorrected"] == 3 and facts["gpus"][1]["retired_pages_pending"]
    assert (facts["gpus"][1]["nvlink_up"], facts["gpus"][1]["nvlink_down"]) == (2, 1)
    said = node_problems(node("p", gpus=facts, efa={"devices": ["rdmap0s31"]}), "p4d.24xlarge")
    assert said == [
        "2 of the 8 GPUs a p4d.24xlarge has",
        "GPU 1: 3 uncorrected ECC errors",
        "GPU 1: retired memory pages pending (the GPU needs a reset)",
        "GPU 1: 1 of 3 NVLink links down",
        "XID errors during the check: 79",
    ]
