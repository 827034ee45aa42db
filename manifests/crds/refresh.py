#!/usr/bin/env python3
"""Refresh the operators' own CRDs in this folder (manifests/crds/) and record where each
came from (repository, ref, commit, path, sha256) in SOURCES.json.

    python manifests/crds/refresh.py             # from GitHub (needs its network)
    python manifests/crds/refresh.py --git kubeflow/trainer=/path/to/clone ...
                                                 # from local clones (git show REF:PATH)

The files are kept as the projects publish them: torchdeck's `render
--validate`, its submit-time checks and the tests read them, so what is
rendered is checked against what the operators wrote, not against a copy
written here. To support another release, add a row and run this."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

OUT = Path(__file__).resolve().parent

# (file here, repository, ref, path in the repository)
SOURCES = [
    (
        "pytorchjob-trainer-v1.9.4.yaml",
        "kubeflow/trainer",
        "v1.9.4",
        "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
    ),
    # What the Training Operator v1 installs for MPIJob (serves v1 only): read
    # by the tests to show that preflight says so.
    ("mpijob-v1-trainer-v1.9.4.yaml", "kubeflow/trainer", "v1.9.4", "manifests/base/crds/kubeflow.org_mpijobs.yaml"),
    (
        "trainjob-trainer-v2.0.1.yaml",
        "kubeflow/trainer",
        "v2.0.1",
        "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
    ),
    (
        "trainjob-trainer-v2.1.0.yaml",
        "kubeflow/trainer",
        "v2.1.0",
        "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
    ),
    (
        "trainjob-trainer-v2.2.1.yaml",
        "kubeflow/trainer",
        "v2.2.1",
        "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
    ),
    (
        "trainjob-trainer-v2.3.0.yaml",
        "kubeflow/trainer",
        "v2.3.0",
        "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
    ),
    # The release-0.8 commit "Prepare v0.8.2"; the CRD is the same as v0.8.0's.
    (
        "mpijob-mpi-operator-v0.8.2.yaml",
        "kubeflow/mpi-operator",
        "b10758da23ce5d9b9efa6f42f7b050dc8605f5f5",
        "manifests/base/kubeflow.org_mpijobs.yaml",
    ),
    (
        "elasticjob-elastic-v0.2.2.yaml",
        "pytorch/elastic",
        "v0.2.2",
        "kubernetes/config/crd/bases/elastic.pytorch.org_elasticjobs.yaml",
    ),
    # Kueue (kubernetes-sigs/kueue), for shared clusters that queue jobs: the queues a job names, and
    # the Workload Kueue makes of it (serving v1beta2, and v1beta1 for older clients)
    *[
        (
            f"{kind}-kueue-v0.19.2.yaml",
            "kubernetes-sigs/kueue",
            "v0.19.2",
            f"config/components/crd/bases/kueue.x-k8s.io_{kind}.yaml",
        )
        for kind in ("localqueues", "clusterqueues", "resourceflavors", "workloads")
    ],
]


def from_git(clone: str, ref: str, path: str) -> tuple[bytes, str]:
    commit = subprocess.run(
        ["git", "-C", clone, "rev-parse", f"{ref}^{{commit}}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    data = subprocess.run(["git", "-C", clone, "show", f"{commit}:{path}"], capture_output=True, check=True).stdout
    return data, commit


def from_github(repo: str, ref: str, path: str) -> tuple[bytes, str]:
    with urllib.request.urlopen(f"https://api.github.com/repos/{repo}/commits/{ref}", timeout=30) as r:
        commit = json.load(r)["sha"]
    with urllib.request.urlopen(f"https://raw.githubusercontent.com/{repo}/{commit}/{path}", timeout=60) as r:
        return r.read(), commit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--git",
        action="append",
        default=[],
        metavar="OWNER/NAME=DIR",
        help="read that repository from a local clone instead of GitHub",
    )
    parser.add_argument("--only", metavar="REPO", help="refresh that repository's files only (owner/name)")
    args = parser.parse_args()
    clones = dict(item.split("=", 1) for item in args.git)
    OUT.mkdir(parents=True, exist_ok=True)
    sources = OUT / "SOURCES.json"
    record = json.loads(sources.read_text()) if args.only and sources.exists() else {}
    for name, repo, ref, path in SOURCES:
        if args.only and repo != args.only:
            continue
        data, commit = from_git(clones[repo], ref, path) if repo in clones else from_github(repo, ref, path)
        (OUT / name).write_bytes(data)
        record[name] = {
            "repository": repo,
            "ref": ref,
            "commit": commit,
            "path": path,
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        print(f"{name}: {repo}@{ref} ({commit[:12]}) {len(data) // 1024} KiB", file=sys.stderr)
    (OUT / "SOURCES.json").write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
