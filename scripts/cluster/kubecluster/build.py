"""The cluster's programs, each built once from its upstream Go module at the release versions.toml
declares, into the cache (one folder per program and release, written only on success: a later start
finds it and takes seconds). One build at a time: a lock in the cache, which a start waits on while
scripts/test's build runs in the background."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kubecluster.layout import KUBE_SOURCE, PAUSE_SOURCE, Cluster
from kubecluster.owned import private_dir
from kubecluster.processes import NoCluster, say

GO_ENV = {"GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
DEBIAN_NEEDS = (
    ("iptables", "iptables"),
    ("conntrack", "conntrack"),
    ("pkg-config", "pkg-config"),
    ("/usr/include/seccomp.h", "libseccomp-dev"),
    ("/bin/busybox", "busybox-static"),
)
"""(tool or file, the Debian package that gives it): kube-proxy's and the kubelet's tools, runc's
seccomp, the init-container image's busybox."""
STRIPPED = ("-ldflags", "-s -w")


@dataclass(frozen=True)
class GoProgram:
    """PACKAGES (paths in MODULE, e.g. ./cmd/x) built with FLAGS into FOLDER, as a release builds them."""

    folder: Path
    module: str
    version: str
    packages: tuple[str, ...]
    flags: tuple[str, ...] = STRIPPED
    cgo: bool = False


def go_programs(cluster: Cluster) -> list[GoProgram]:
    v, p = cluster.versions, cluster.programs
    containerd_flags = ("-ldflags", f"-s -w -X github.com/containerd/containerd/v2/version.Version={v.containerd}")
    return [
        GoProgram(p.containerd, "github.com/containerd/containerd/v2", v.containerd,
                  ("./cmd/containerd", "./cmd/containerd-shim-runc-v2", "./cmd/ctr"),
                  ("-tags", "no_btrfs,no_devmapper,no_zfs", *containerd_flags)),
        # runc with seccomp (pods ask for the RuntimeDefault profile): cgo and Debian's libseccomp-dev
        GoProgram(p.runc, "github.com/opencontainers/runc", v.runc, (".",),
                  ("-tags", "seccomp", "-ldflags", f"-s -w -X main.version={v.runc.removeprefix('v')}"), cgo=True),
        GoProgram(p.cni, "github.com/containernetworking/plugins", v.cni_plugins,
                  ("./plugins/main/bridge", "./plugins/main/loopback", "./plugins/ipam/host-local",
                   "./plugins/meta/portmap")),
        GoProgram(p.coredns, "github.com/coredns/coredns", v.coredns, (".",)),
        GoProgram(p.metrics_server, "sigs.k8s.io/metrics-server", v.metrics_server, ("./cmd/metrics-server",)),
        GoProgram(p.training_operator, "github.com/kubeflow/training-operator", v.training_operator,
                  ("./cmd/training-operator.v1",)),
        GoProgram(p.jobset, "sigs.k8s.io/jobset", v.jobset, (".",)),
        GoProgram(p.trainer, "github.com/kubeflow/trainer/v2", v.trainer, ("./cmd/trainer-controller-manager",)),
        GoProgram(p.mpi_operator, "github.com/kubeflow/mpi-operator", v.mpi_operator, ("./cmd/mpi-operator",)),
        GoProgram(p.kueue, "sigs.k8s.io/kueue", v.kueue, ("./cmd/kueue",)),
        GoProgram(p.registry, "github.com/distribution/distribution/v3", v.registry, ("./cmd/registry",)),
    ]  # fmt: skip


def module_dir(module: str, version: str) -> Path:
    """The module's source as Go downloads it (its module cache), for its manifests and builds."""
    done = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"], capture_output=True,
                          text=True, env={**os.environ, **GO_ENV})  # fmt: skip
    try:
        return Path(json.loads(done.stdout)["Dir"])
    except (ValueError, KeyError):
        raise NoCluster(
            f"could not download {module}@{version}: {(done.stderr or done.stdout).strip()[-300:]}"
        ) from None


def _go_build(program: GoProgram, env: dict[str, str]) -> None:
    if program.folder.is_dir():
        return
    log = program.folder.with_name("bin.log")
    partial = program.folder.with_name("bin.tmp")
    say(f"building {program.module}@{program.version} {' '.join(program.packages)} (once; cached in {program.folder})")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    started = time.monotonic()
    try:
        source = module_dir(program.module, program.version)
    except NoCluster as error:
        log.write_text(str(error) + "\n")
        raise NoCluster(f"could not download {program.module}@{program.version} (log: {log})") from None
    command = ["go", "build", "-trimpath", "-o", f"{partial}/", *program.flags, *program.packages]
    build_env = {**env, "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "1" if program.cgo else "0"}
    with log.open("a") as output:
        done = subprocess.run(command, cwd=source, env=build_env, stdout=output, stderr=output)
    if done.returncode != 0:
        raise NoCluster(f"could not build {program.module}@{program.version} (log: {log})")
    (partial / "build-seconds").write_text(f"{round(time.monotonic() - started)}\n")
    partial.rename(program.folder)


def kube_module_version() -> str:
    """The k8s.io/kubernetes release scripts/cluster/kube's go.mod builds (Go's own pin of it)."""
    for line in (KUBE_SOURCE / "go.mod").read_text().splitlines():
        words = line.split()
        if words[:1] == ["k8s.io/kubernetes"] and len(words) >= 2:
            return words[1]
    return ""


def _build_kubernetes(cluster: Cluster, env: dict[str, str]) -> None:
    """Kubernetes and etcd as one multi-call program (scripts/cluster/kube), told its version as a
    release is (else it reports v0.0.0 and kubeadm asks dl.k8s.io). Its go.mod pins the module; the
    release declared in versions.toml must be that one."""
    folder, version = cluster.programs.kube_bin, cluster.versions.kubernetes
    if (folder / "kube").is_file():
        return
    pinned = kube_module_version()
    if pinned != version:
        raise NoCluster(
            f"manifests/versions.toml says Kubernetes {version}, scripts/cluster/kube/go.mod builds {pinned or 'none'}: "
            f"go get k8s.io/kubernetes@{version} there (and its k8s.io/* replaces), or declare {pinned}"
        )
    say(f"building Kubernetes {version} and etcd as one program (once, 15-25 minutes on 2 cores; cached in {folder})")
    minor = version.removeprefix("v1.").split(".")[0]
    ldflags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        ldflags += [f"-X {package}.{name}={value}" for name, value in (
            ("gitVersion", version), ("gitMajor", "1"), ("gitMinor", minor), ("gitTreeState", "clean"),
            ("buildDate", "1970-01-01T00:00:00Z"))]  # fmt: skip
    partial = folder.with_name("bin.tmp")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log = folder.with_name("bin.log")
    started = time.monotonic()
    command = ["go", "build", "-trimpath", "-ldflags", " ".join(ldflags), "-o", str(partial / "kube"), "."]
    with log.open("w") as output:
        done = subprocess.run(command, cwd=KUBE_SOURCE, env={**env, "CGO_ENABLED": "0"}, stdout=output, stderr=output)
    if done.returncode != 0:
        raise NoCluster(f"could not build Kubernetes (log: {log})")
    (partial / "build-seconds").write_text(f"{round(time.monotonic() - started)}\n")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)


def _build_pause(cluster: Cluster) -> None:
    folder = cluster.programs.pause
    if (folder / "pause").is_file():
        return
    partial = folder.with_name("bin.tmp")
    partial.mkdir(parents=True, exist_ok=True)
    log = folder.with_name("bin.log")
    with log.open("w") as output:
        done = subprocess.run(["gcc", "-Os", "-static", "-o", str(partial / "pause"), str(PAUSE_SOURCE)],
                              stdout=output, stderr=output)  # fmt: skip
    if done.returncode != 0:
        raise NoCluster(f"could not build the pause program (log: {log})")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)


def install_debian_packages(cluster: Cluster) -> None:
    """Debian's packages for the tools and files that are missing; apt's log in a root-only folder of
    the cache (a fixed name in /tmp may be anyone's symlink)."""
    want = [package for need, package in DEBIAN_NEEDS
            if not (Path(need).exists() if need.startswith("/") else shutil.which(need))]  # fmt: skip
    if not want:
        return
    if not shutil.which("apt-get"):
        raise NoCluster(f"no apt-get to install {' '.join(want)}")
    if os.geteuid() != 0:
        raise NoCluster(f"not root to install {' '.join(want)}")
    private_dir(cluster.cache / "build-logs")
    log = cluster.cache / "build-logs" / "apt.log"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", *want]
    with log.open("w") as output:
        if subprocess.run(install, env=env, stdout=output, stderr=output).returncode == 0:
            return
        if (subprocess.run(["apt-get", "update", "-q"], stdout=output, stderr=output).returncode == 0
                and subprocess.run(install, env=env, stdout=output, stderr=output).returncode == 0):  # fmt: skip
            return
    raise NoCluster(f"apt-get could not install {' '.join(want)} (log: {log})")


def build(cluster: Cluster) -> None:
    """Every program built or found. A start waits for the build under way (scripts/test's, in the
    background) and then finds every program built."""
    if not shutil.which("go"):
        raise NoCluster("no Go toolchain (the programs are built from their Go modules)")
    cluster.cache.mkdir(parents=True, exist_ok=True)
    with (cluster.cache / ".build-lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("waiting for the build under way (scripts/test starts one in the background)")
            fcntl.flock(lock, fcntl.LOCK_EX)
        # Go's build cache of these programs (GBs) serves only this build: the programs are kept, it is not
        go_cache = cluster.cache / "go-build"
        env = {**os.environ, **GO_ENV, "GOCACHE": str(go_cache)}
        if not shutil.which("gcc"):
            raise NoCluster("no gcc (runc and the pause program need it)")
        install_debian_packages(cluster)
        _build_pause(cluster)
        for program in go_programs(cluster):
            _go_build(program, env)
        _build_kubernetes(cluster, env)
        shutil.rmtree(go_cache, ignore_errors=True)
