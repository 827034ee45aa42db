"""The releases the cluster runs, read from manifests/versions.toml, where they are declared once (the
CRD table and the docs' tests read the same file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[3]
VERSIONS_FILE = REPO / "manifests" / "versions.toml"


@dataclass(frozen=True)
class Versions:
    """One release per component, each a tag as its Go module names it (v1.34.4)."""

    kubernetes: str
    containerd: str
    runc: str
    cni_plugins: str
    coredns: str
    metrics_server: str
    kwok: str
    registry: str
    training_operator: str
    trainer: str
    jobset: str
    mpi_operator: str
    kueue: str


def read_versions(path: Path = VERSIONS_FILE) -> Versions:
    """The [cluster] and [operators] tables of versions.toml as one value; a missing or unknown name is
    an error here rather than a build of the wrong release later."""
    with path.open("rb") as file:
        tables = tomllib.load(file)
    merged = {**tables["cluster"], **tables["operators"]}
    return Versions(**merged)
