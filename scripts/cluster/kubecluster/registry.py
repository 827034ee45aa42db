"""The images: a registry (distribution v3) in the namespace that the node's containerd pulls from, its
layers kept in the cache, so a rebuilt image moves only the layers it does not hold yet; the Docker
engine on the host pushes to it through a forwarder on 127.0.0.1."""

from __future__ import annotations

import subprocess
import urllib.request

from kubecluster.formats import write_file, yaml_text
from kubecluster.layout import Cluster, Node
from kubecluster.node import ctr
from kubecluster.processes import NoCluster, run, running, start_component, start_forwarder, wait_for

IN_NAMESPACE = "127.0.0.1:5000"
PORT = 5000


def registry_address(cluster: Cluster, node: Node) -> str:
    """Where NODE's containerd reaches the registry: on loopback in the cluster's own namespace, across
    the fabric at the control plane's address from another node's."""
    return IN_NAMESPACE if node is cluster.control else f"{cluster.control.ip}:{PORT}"


def start_registry(cluster: Cluster) -> None:
    store = cluster.cache / "registry"
    store.mkdir(parents=True, exist_ok=True)
    config = {
        "version": "0.1",
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(store)}, "maintenance": {"uploadpurging": {"enabled": False}}},
        "http": {"addr": f":{PORT}"},
    }
    write_file(cluster.conf / "registry.yml", yaml_text(config))
    start_component(
        cluster, "registry", [cluster.programs.registry / "registry", "serve", cluster.conf / "registry.yml"]
    )
    start_forwarder(cluster, "registry-forward", cluster.registry_port, IN_NAMESPACE, "TORCHDECK_REGISTRY_PORT")
    url = f"http://127.0.0.1:{cluster.registry_port}/v2/"
    wait_for(cluster, 30, "the registry", lambda: urllib.request.urlopen(url, timeout=5).status == 200)


def docker_reference(image: str) -> str:
    """IMAGE named in full, as containerd names what docker calls busybox:1 (docker.io/library/busybox:1)."""
    reference = image if "/" in image else f"library/{image}"
    first = reference.split("/", 1)[0]
    if not ("." in first or ":" in first or first == "localhost"):
        reference = f"docker.io/{reference}"
    return reference


def _images(cluster: Cluster, node: Node, *filters: str) -> list[tuple[str, str]]:
    """(name, digest) of the node's images (those FILTERS select)."""
    done = subprocess.run([*ctr(cluster, node), "images", "ls", *filters], capture_output=True, text=True)
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    return [(row[0], row[2]) for row in rows if len(row) > 2]


def _docker_holds(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def load(cluster: Cluster, images: list[str]) -> None:
    """The Docker images each node's containerd does not hold yet, through the registry: docker pushes
    the layers it lacks (a changed image: its top layers), each containerd pulls what it lacks and names
    the image as docker does (and keeps docker's image id as a name too)."""
    if not running(cluster, "registry"):
        raise NoCluster("not started (the registry is part of the cluster)")
    references, pushed = [], set()
    for image in images:
        inspected = run(["docker", "image", "inspect", "--format", "{{.Id}}", image], check=False)
        if inspected.returncode != 0:
            raise NoCluster(f"docker has no image {image}")
        image_id, reference = inspected.stdout.strip(), docker_reference(image)
        references.append(reference)
        path = reference.split("/", 1)[1]  # the repository and tag without the registry's name
        for node in cluster.nodes:
            named = [digest for _, digest in _images(cluster, node, f"name=={reference}")]
            by_id = [digest for _, digest in _images(cluster, node, f"name=={image_id}")]
            if named and named == by_id:
                continue
            if path not in pushed:
                push(cluster, image, path)
                pushed.add(path)
            # the pull runs in containerd (its transfer service), in the node's namespace
            pulled = f"{registry_address(cluster, node)}/{path}"
            if run([*ctr(cluster, node), "images", "pull", "--plain-http", pulled], check=False).returncode != 0:
                raise NoCluster(f"containerd on {node.name} could not pull {path} from the registry")
            run([*ctr(cluster, node), "images", "tag", "--force", pulled, reference])
            run([*ctr(cluster, node), "images", "rm", pulled])
    for node in cluster.nodes:
        for reference in references:
            if not run([*ctr(cluster, node), "images", "ls", "-q", f"name=={reference}"], check=False).stdout.strip():
                raise NoCluster(f"containerd on {node.name} did not take {reference}")
            prune(cluster, node, reference.rpartition(":")[0])


def push(cluster: Cluster, image: str, path: str) -> None:
    pushed = f"127.0.0.1:{cluster.registry_port}/{path}"
    run(["docker", "tag", image, pushed])
    if run(["docker", "push", "-q", pushed], check=False).returncode != 0:
        raise NoCluster(f"docker could not push {image} to the registry")
    run(["docker", "rmi", "--no-prune", pushed])


def prune(cluster: Cluster, node: Node, repository: str) -> None:
    """The node keeps no image of REPOSITORY that docker no longer holds (its layers, several GB each,
    go with the last name that holds them); docker's id names go with them."""
    kept, gone = set(), set()
    for name, digest in _images(cluster, node):
        if not name.startswith(f"{repository}:"):
            continue
        short = name.removeprefix("docker.io/").removeprefix("library/")
        if _docker_holds(short):
            kept.add(digest)
        else:
            gone.add(digest)
            run([*ctr(cluster, node), "images", "rm", name], check=False)
    for name, digest in _images(cluster, node):
        if name.startswith("sha256:") and digest in gone and digest not in kept:
            run([*ctr(cluster, node), "images", "rm", name], check=False)
