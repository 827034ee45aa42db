"""The real single-node Kubernetes cluster the end-to-end tests (tests/cluster/) run against, as a
program: it builds every component from its upstream Go module at the release manifests/versions.toml
declares, starts them in a network namespace of its own with no route out (the host reaches it only
through forwarders on 127.0.0.1), loads images through its registry, reports their status, and stops
only what it made. `scripts/kube-cluster.sh` runs it (`python3 -m kubecluster`, stdlib only: it runs
as root with the system Python before any venv exists).

Modules by concern: versions (the releases), layout (the cluster and its nodes as values), formats
(the writers of the TOML, YAML and Corefile it writes from data), owned (how it tells what it made),
build, api (kubectl and the objects it applies), node, control_plane, components (the add-ons and
controllers), registry (images), stop, cli.

`python3 -m kubecluster COMMAND` (commands: cli). A folder of modules, not a package of torchdeck's:
it ships in no wheel (it has no __init__.py, so the package torchdeck installs does not take it in),
and its modules import each other as ``kubecluster.*`` from scripts/cluster on the path."""

import sys

from kubecluster.cli import main

sys.exit(main(sys.argv[1:]))
