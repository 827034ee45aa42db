"""Edit, re-run: the no-rebuild path on a cluster. The example folder
(examples/ddp) is submitted as a PyTorchJob to a real HTTP Kubernetes API
(kmock, with the gaps closed by tests/support/kube_cluster.py); then submitted again
unchanged, then again after an edit to its script. For each submit we print
its wall time and what it sent of the code (its ConfigMap, by digest, and
the bytes); nothing is built (no image, no docker). Target: an edit sends
only the new bundle; an unchanged folder sends nothing.

    .venv/bin/python benchmarks/cluster_rerun.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from host import calibration

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    print(calibration(), flush=True)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    sys.path.insert(0, str(REPO / "tests" / "support"))
    from kube_cluster import start_cluster, stop_cluster
    from kube_jobs import NS, install

    from torchdeck.backends import bundle
    from torchdeck.backends.kubernetes.backend import KubernetesBackend
    from torchdeck.backends.spec import spec_from_dict

    with tempfile.TemporaryDirectory() as tmp:
        cluster, thread = start_cluster(Path(tmp))
        cluster.emulator.namespaces.add(NS)
        backend = KubernetesBackend(cluster.kubeconfig)
        install(backend, kinds=("pytorchjob",))
        code = Path(tmp) / "ddp"
        shutil.copytree(REPO / "examples" / "ddp", code)
        timings: dict[str, list[float]] = {"first": [], "unchanged": [], "edited": []}
        for n in range(a.repeats):
            for label in timings:
                if label == "edited":
                    script = code / "train_text.py"
                    script.write_text(script.read_text() + f"\n# edit {n}\n")
                spec = spec_from_dict(
                    {"name": f"rerun-{n}-{label}", "image": "repo/torchdeck:1", "namespace": NS, "nodes": 2,
                     "entrypoint": {"script": "train_text.py", "code": str(code)},
                     "cluster": {"pvc": "shared", "service_account": "torchdeck-s3"}}
                )  # fmt: skip
                t0 = time.perf_counter()
                backend.submit(spec)
                took = time.perf_counter() - t0
                if label == "first" and n:
                    continue  # the folder is on the cluster since the first round
                timings[label].append(took)
                size = len(bundle.pack(code).data)
                sent = ", ".join(backend.sent) or "nothing"
                print(f"  {label:9s} submit {took * 1000:6.0f} ms, sent {sent} ({size} bytes packed)")
        stop_cluster(cluster, thread)
    for label, found in timings.items():
        print(f"{label}: median submit {statistics.median(found) * 1000:.0f} ms ({len(found)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
