#!/usr/bin/env bash
# A real single-node Kubernetes cluster for the end-to-end tests (tests/cluster/), as the users' EKS
# runs it: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a kubelet on containerd and
# runc with the CNI bridge plugin, kube-proxy, CoreDNS, metrics-server registered as the
# metrics.k8s.io APIService, the Kubeflow Training Operator (PyTorchJob), Kubeflow Trainer v2
# (TrainJob, with its TrainJobStatus gate and torch runtime) on JobSet, the MPI Operator (MPIJob
# v2beta1) and Kueue (with its visibility API), each with its own CRDs and webhooks (served with
# certificates from a CA this script makes), and a registry (distribution v3) the images reach the
# node through, layer by layer. Every program is built here from its upstream Go module at the version pinned
# below, once, into a cache outside the work tree ($TORCHDECK_CLUSTER_CACHE, by default
# ~/.cache/torchdeck/cluster, one folder per program and version); later starts take seconds.
#
#   start       build what is missing, start the cluster, print KUBECONFIG=... (idempotent)
#   stop        stop it and remove everything it made outside the cache (idempotent)
#   status      one line per component; exit 0 when all run
#   kubeconfig  print the path of the host's kubeconfig (the API server on 127.0.0.1:$TORCHDECK_KUBE_PORT)
#   load IMAGE  a Docker image into the node's containerd through the cluster's registry (by layer: what
#               the registry and the node hold already does not move again)
#   kubectl ARGS  kubectl against the cluster, from the host
#   ctr ARGS    the node's containerd (namespace k8s.io), e.g. `ctr images ls`
#   build       only build (or find) the programs
#   kueue-integrations default|torchdeck  run Kueue again with its own default integrations (no
#               kubeflow.org/pytorchjob from v0.19), or with those torchdeck submits (as start does)
#
# Network: every component and every pod lives in the network namespace torchdeck-kube, which has a
# bridge (10.244.0.1/24) and no route out. The host reaches the API server only through a forwarder
# listening on 127.0.0.1. The kubelet's and containerd's cgroups live under a root of the cluster's
# own (/torchdeck-kube in each hierarchy), never kubepods or k8s.io at the host's top.
#
# A stop acts only on what this cluster made (scripts/cluster/owned.sh): a component whose pid and
# start time are both the ones recorded when it started, the processes in its own cgroup root, the
# mounts that were not in the mount table at start, the fixed paths it recorded as it made them; it
# restores the global sysctls the kubelet changes and removes the namespace. Its logs (apt's too) are
# in $state/logs, a folder only root reads: it writes no fixed name in /tmp. Anything missing prints
# one line starting "torchdeck: no cluster:" and exits 3.
set -euo pipefail

KUBERNETES=v1.34.4 # EKS supports 1.33-1.35; 1.34's kubelet still runs on cgroup v1 without an opt-out
CONTAINERD=v2.2.9  # supports Kubernetes 1.34 (containerd's support matrix), cgroup v1 included
RUNC=v1.3.6
CNI_PLUGINS=v1.9.1
COREDNS=v1.12.4 # the CoreDNS EKS ships as its 1.34 add-on
METRICS_SERVER=v0.8.0
TRAINING_OPERATOR=v1.9.4 # Kubeflow Training Operator: PyTorchJob, the newest 1.9 (the release EKS users run)
TRAINER=v2.3.0     # Kubeflow Trainer v2 (TrainJob): the newest release the module proxy serves
JOBSET=v0.12.0     # JobSet, the version Trainer v2.3.0 and Kueue v0.19.2 are built against
MPI_OPERATOR=v0.8.2 # MPI Operator (v2beta1 MPIJob): the newest release the module proxy serves
KUEUE=v0.19.2      # Kueue: the newest release the module proxy serves
REGISTRY=v3.1.2    # the registry the images move through by layer (github.com/distribution/distribution/v3)

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/cluster/owned.sh
source "$here/cluster/owned.sh"
cache="${TORCHDECK_CLUSTER_CACHE:-$HOME/.cache/torchdeck/cluster}"
state=/var/lib/torchdeck-kube
ns=torchdeck-kube
node=torchdeck-node
node_ip=10.244.0.1
pod_cidr=10.244.0.0/24
service_cidr=10.96.0.0/16
port="${TORCHDECK_KUBE_PORT:-16443}"
# the registry in the namespace (127.0.0.1:5000 there) as the engine on the host pushes to it
registry_port="${TORCHDECK_REGISTRY_PORT:-16500}"
pause_image=torchdeck.local/pause:3.10
# the Training Operator's init container (it waits with sh and nslookup until the master's name
# resolves; upstream's default is alpine from Docker Hub, which no registry here serves)
init_image=torchdeck.local/busybox:1.35
# paths outside $state the components (or this script) use at names they fix: start makes those that
# are missing and records each; stop removes only the recorded ones
fixed_paths=(/var/log/pods /var/log/containers /var/lib/cni /run/containerd /run/nri /var/lib/kubelet /etc/kubernetes /etc/kueue /visibility)
# where mounts of the cluster's may be; stop unmounts only those not there at start
mount_roots=("$state" "$cache/containerd-root" /run/containerd /var/lib/kubelet /tmp/k8s-webhook-server)
cgroup_root=torchdeck-kube # the kubelet's cgroupRoot, containerd's cgroup under it
sysctls=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)
export GOFLAGS=-mod=mod GOTOOLCHAIN=local

missing() { echo "torchdeck: no cluster: $*" >&2; exit 3; }
say() { echo "kube-cluster: $*" >&2; }

bin() { echo "$cache/$1-$2/bin"; }
# the multi-call program is ours too: its folder is keyed by its source as well as the version
kube_bin="$(bin kubernetes "$KUBERNETES-$(cat "$here"/cluster/kube/go.mod "$here"/cluster/kube/go.sum "$here"/cluster/kube/*.go \
    | sha256sum | cut -c1-12)")"
containerd_bin="$(bin containerd "$CONTAINERD")"
runc_bin="$(bin runc "$RUNC")"
cni_bin="$(bin cni-plugins "$CNI_PLUGINS")"
coredns_bin="$(bin coredns "$COREDNS")"
metrics_bin="$(bin metrics-server "$METRICS_SERVER")"
operator_bin="$(bin training-operator "$TRAINING_OPERATOR")"
trainer_bin="$(bin trainer "$TRAINER")"
jobset_bin="$(bin jobset "$JOBSET")"
mpi_bin="$(bin mpi-operator "$MPI_OPERATOR")"
kueue_bin="$(bin kueue "$KUEUE")"
registry_bin="$(bin registry "$REGISTRY")"
pause_bin="$(bin pause 3.10)"
kube="$kube_bin/kube"
ctr=("$containerd_bin/ctr" --address "$state/containerd/containerd.sock" -n k8s.io)
kubectl() { "$kube" kubectl --kubeconfig "$state/kubeconfig" "$@"; } # through the forwarder on 127.0.0.1
in_ns() { nsenter --net="/run/netns/$ns" "$@"; }

# ---- build ----------------------------------------------------------------------------------------

# go_install DIR MODULE VERSION PACKAGE... [-- GO FLAGS]: build the module's packages (paths relative to
# the module, e.g. ./cmd/x) in the module's own folder with its own go.mod and go.sum, as a release
# builds it (`go install MODULE@VERSION` would also ask the proxy for the module's version list, which
# it does not list for every module); one folder per program and version, written only on success.
go_install() {
    local dir="$1" module="$2" version="$3"
    shift 3
    [ -d "$dir" ] && return 0
    local flags=() packages=() source
    while [ $# -gt 0 ]; do
        if [ "$1" = -- ]; then shift; flags=("$@"); break; fi
        packages+=("$1"); shift
    done
    say "building $module@$version ${packages[*]} (once; cached in $dir)"
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    local started=$SECONDS
    source="$(module_dir "$module@$version" 2>"$dir.log")" || missing "could not download $module@$version (log: $dir.log)"
    (cd "$source" && GOFLAGS=-mod=readonly go build -trimpath -o "$dir.tmp/" "${flags[@]}" "${packages[@]}") >>"$dir.log" 2>&1 \
        || missing "could not build $module@$version (log: $dir.log)"
    echo $((SECONDS - started)) >"$dir.tmp/build-seconds"
    mv "$dir.tmp" "$dir"
}

build_kubernetes() {
    [ -x "$kube" ] && return 0
    say "building Kubernetes $KUBERNETES and etcd as one program (once, 15-25 minutes on 2 cores; cached in $kube_bin)"
    local minor="${KUBERNETES#v1.}" ldflags="-s -w" package
    minor="${minor%%.*}"
    for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags="$ldflags -X $package.gitVersion=$KUBERNETES -X $package.gitMajor=1 -X $package.gitMinor=$minor"
        ldflags="$ldflags -X $package.gitTreeState=clean -X $package.buildDate=1970-01-01T00:00:00Z"
    done
    mkdir -p "$kube_bin.tmp"
    local started=$SECONDS
    (cd "$here/cluster/kube" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$kube_bin.tmp/kube" .) \
        >"$kube_bin.log" 2>&1 || missing "could not build Kubernetes (log: $kube_bin.log)"
    echo $((SECONDS - started)) >"$kube_bin.tmp/build-seconds"
    rm -rf "$kube_bin" && mv "$kube_bin.tmp" "$kube_bin"
}

build_pause() {
    [ -x "$pause_bin/pause" ] && return 0
    mkdir -p "$pause_bin.tmp"
    gcc -Os -static -o "$pause_bin.tmp/pause" "$here/cluster/pause.c" 2>"$pause_bin.log" \
        || missing "could not build the pause program (log: $pause_bin.log)"
    rm -rf "$pause_bin" && mv "$pause_bin.tmp" "$pause_bin"
}

build() {
    command -v go >/dev/null || missing "no Go toolchain (the programs are built from their Go modules)"
    # one build at a time: a start waits for the one under way (scripts/test's, in the background)
    # and then finds every program built
    mkdir -p "$cache"
    local lock
    exec {lock}>"$cache/.build-lock"
    if ! flock -n "$lock"; then
        say "waiting for the build under way (scripts/test starts one in the background)"
        flock "$lock"
    fi
    # Go's build cache of these programs (GBs) serves only this build: the programs are kept, it is not
    export GOCACHE="$cache/go-build"
    command -v gcc >/dev/null || missing "no gcc (runc and the pause program need it)"
    packages iptables:iptables conntrack:conntrack pkg-config:pkg-config /usr/include/seccomp.h:libseccomp-dev \
        /bin/busybox:busybox-static
    build_pause
    CGO_ENABLED=0 go_install "$containerd_bin" github.com/containerd/containerd/v2 "$CONTAINERD" ./cmd/containerd \
        ./cmd/containerd-shim-runc-v2 ./cmd/ctr \
        -- -tags no_btrfs,no_devmapper,no_zfs -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD"
    # runc with seccomp (pods ask for the RuntimeDefault profile): cgo and Debian's libseccomp-dev
    CGO_ENABLED=1 go_install "$runc_bin" github.com/opencontainers/runc "$RUNC" . -- -tags seccomp -ldflags "-s -w -X main.version=${RUNC#v}"
    CGO_ENABLED=0 go_install "$cni_bin" github.com/containernetworking/plugins "$CNI_PLUGINS" ./plugins/main/bridge \
        ./plugins/main/loopback ./plugins/ipam/host-local ./plugins/meta/portmap -- -ldflags "-s -w"
    CGO_ENABLED=0 go_install "$coredns_bin" github.com/coredns/coredns "$COREDNS" . -- -ldflags "-s -w"
    CGO_ENABLED=0 go_install "$metrics_bin" sigs.k8s.io/metrics-server "$METRICS_SERVER" ./cmd/metrics-server -- -ldflags "-s -w"
    CGO_ENABLED=0 go_install "$operator_bin" github.com/kubeflow/training-operator "$TRAINING_OPERATOR" \
        ./cmd/training-operator.v1 -- -ldflags "-s -w"
    CGO_ENABLED=0 go_install "$jobset_bin" sigs.k8s.io/jobset "$JOBSET" . -- -ldflags "-s -w"
    CGO_ENABLED=0 go_install "$trainer_bin" github.com/kubeflow/trainer/v2 "$TRAINER" ./cmd/trainer-controller-manager -- -ldflags "-s -w"
    CGO_ENABLED=0 go_install "$mpi_bin" github.com/kubeflow/mpi-operator "$MPI_OPERATOR" ./cmd/mpi-operator -- -ldflags "-s -w"
    CGO_ENABLED=0 go_install "$kueue_bin" sigs.k8s.io/kueue "$KUEUE" ./cmd/kueue -- -ldflags "-s -w"
    CGO_ENABLED=0 go_install "$registry_bin" github.com/distribution/distribution/v3 "$REGISTRY" ./cmd/registry -- -ldflags "-s -w"
    build_kubernetes
    rm -rf "$GOCACHE"
    exec {lock}>&-
}

packages() { # packages TOOL_OR_FILE:PACKAGE...: install Debian's packages for what is missing
    local want=() pair
    for pair in "$@"; do
        if [[ "${pair%%:*}" == /* ]]; then [ -e "${pair%%:*}" ] && continue
        else command -v "${pair%%:*}" >/dev/null && continue; fi
        want+=("${pair#*:}")
    done
    [ ${#want[@]} = 0 ] && return 0
    command -v apt-get >/dev/null || missing "no apt-get to install ${want[*]}"
    [ "$(id -u)" = 0 ] || missing "not root to install ${want[*]}"
    # the log in a root-only folder of the cache (a fixed name in /tmp may be anyone's symlink; the
    # build runs before a start, and in the background beside the tests: it makes nothing at a fixed path)
    private_dir "$cache/build-logs"
    local log="$cache/build-logs/apt.log"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${want[@]}" >"$log" 2>&1 \
        || { apt-get update -q >>"$log" 2>&1 \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${want[@]}" >>"$log" 2>&1; } \
        || missing "apt-get could not install ${want[*]} (log: $log)"
}

module_dir() { go mod download -json "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'; }

# ---- start ----------------------------------------------------------------------------------------

# run NAME COMMAND...: a component inside the namespace (the host's mount namespace), in a session of
# its own, its output in $state/logs/NAME.log, its pid and start time in $state/pids/NAME.
run() {
    local name="$1"
    shift
    setsid nsenter --net="/run/netns/$ns" "$@" >"$state/logs/$name.log" 2>&1 </dev/null &
    remember_pid "$state/pids/$name" $!
}

running() { owned_pid "$state/pids/$1" >/dev/null; }

wait_for() { # wait_for SECONDS WHAT COMMAND...
    local seconds="$1" what="$2" deadline
    shift 2
    deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || missing "$what did not come up in ${seconds} s (logs: $state/logs)"
        sleep 0.3
    done
}

remember_host() { # what a stop must put back (the sysctls the kubelet sets) and what it may take away:
    # the mounts not in the table now, the fixed paths made here (each recorded as it is made, before
    # any component could make it), the cluster's cgroup root
    local name path
    mount_table >"$state/mounts-before"
    : >"$state/before"
    for name in "${sysctls[@]}"; do echo "sysctl $name $(sysctl -n "$name")" >>"$state/before"; done
    for path in "${fixed_paths[@]}"; do make_fixed "$path"; done
    make_cgroup_root
}

make_fixed() { # make_fixed DIR: a folder at a fixed path and the parents it lacks, each recorded as made here
    local path="$1" absent=()
    while [ ! -e "$path" ] && [ ! -L "$path" ]; do absent=("$path" "${absent[@]}"); path="$(dirname "$path")"; done
    for path in "${absent[@]}"; do
        # (no -p: where someone makes it first, it is theirs)
        mkdir "$path" || missing "could not make $path"
        echo "made $path" >>"$state/before"
    done
}

made() { # made PATH: PATH, or a folder it is in, was made by this start
    local path="$1"
    while [ "$path" != / ]; do
        grep -qxF "made $path" "$state/before" && return 0
        path="$(dirname "$path")"
    done
    return 1
}

place_fixed() { # place_fixed DIR FILE...: FILEs copied into a fixed folder, never over one the cluster did not make
    local dir="$1" file target
    shift
    make_fixed "$dir"
    for file in "$@"; do
        target="$dir/$(basename "$file")"
        if { [ -e "$target" ] || [ -L "$target" ]; } && ! made "$target"; then
            missing "$target is there and not the cluster's (it would be overwritten)"
        fi
        cp "$file" "$target"
        made "$target" || echo "made $target" >>"$state/before"
    done
}

cgroup_hierarchies() { # the mounted cgroup hierarchies (each v1 controller's, and the unified one)
    awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts
}

make_cgroup_root() { # the kubelet checks that its cgroupRoot exists in every hierarchy
    local hierarchy
    while read -r hierarchy; do
        mkdir -p "$hierarchy/$cgroup_root"
        # (a new cpuset cgroup starts with no CPUs and no memory nodes)
        if [ -f "$hierarchy/cpuset.cpus" ]; then
            cat "$hierarchy/cpuset.cpus" >"$hierarchy/$cgroup_root/cpuset.cpus"
            cat "$hierarchy/cpuset.mems" >"$hierarchy/$cgroup_root/cpuset.mems"
        fi
    done < <(cgroup_hierarchies)
}

make_namespace() {
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ns" link add cni0 type bridge
    ip -n "$ns" addr add "$node_ip/24" dev cni0
    ip -n "$ns" link set cni0 up
    # the node itself reaches Services (kube-proxy's DNAT in OUTPUT), as a controller in a pod would:
    # a route for the service range, inside the namespace (still no route out)
    ip -n "$ns" route add "$service_cidr" dev cni0 src "$node_ip"
    in_ns sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 2>/dev/null \
        || in_ns sysctl -qw net.ipv4.ip_forward=1
}

make_pki() {
    local pki="$state/pki"
    # kubeadm's certificate and kubeconfig phases, told the version (else it asks dl.k8s.io), inside
    # the namespace (no route out)
    in_ns "$kube" kubeadm init phase certs all --cert-dir "$pki" --apiserver-advertise-address "$node_ip" \
        --apiserver-cert-extra-sans "127.0.0.1,localhost,$node" --service-cidr "$service_cidr" \
        --kubernetes-version "$KUBERNETES" >/dev/null
    in_ns "$kube" kubeadm init phase kubeconfig all --cert-dir "$pki" --kubeconfig-dir "$pki" \
        --apiserver-advertise-address "$node_ip" --node-name "$node" --kubernetes-version "$KUBERNETES" >/dev/null
    sed "s#server: https://.*#server: https://127.0.0.1:$port#" "$pki/super-admin.conf" >"$state/kubeconfig"
    sed -i 's/kubernetes-super-admin@kubernetes/torchdeck-kube/; s/name: kubernetes$/name: torchdeck-kube/; s/cluster: kubernetes$/cluster: torchdeck-kube/' "$state/kubeconfig"
    chmod 600 "$state/kubeconfig"
}

forward() { # forward NAME HOST_PORT ADDRESS KNOB: relay the host's 127.0.0.1:HOST_PORT to ADDRESS in the
    # namespace (the kube program's forwarder, its listening socket handed in as descriptor 3), as NAME
    local pid
    pid="$(python3 - "$state" "$1" "$2" "$ns" "$kube" "$3" "$4" <<'EOF'
import os, socket, subprocess, sys
state, name, port, ns, kube, address, knob = sys.argv[1:]
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    listener.bind(("127.0.0.1", int(port)))
except OSError as error:
    sys.exit(f"torchdeck: no cluster: 127.0.0.1:{port} is taken ({error.strerror}); set {knob}")
listener.listen(128)


def as_descriptor_3():
    os.setsid()
    if listener.fileno() != 3:
        os.dup2(listener.fileno(), 3)
    os.set_inheritable(3, True)


with open(f"{state}/logs/{name}.log", "wb") as log:
    child = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{ns}", kube, "forward", address],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=as_descriptor_3, close_fds=False,
    )
print(child.pid)
EOF
    )"
    remember_pid "$state/pids/$1" "$pid"
}

start_control_plane() {
    local pki="$state/pki"
    run etcd "$kube" etcd --name "$node" --data-dir "$state/etcd" --listen-client-urls http://127.0.0.1:2379 \
        --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
        --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster "$node=http://127.0.0.1:2380" \
        --listen-metrics-urls http://127.0.0.1:2381 --quota-backend-bytes 2147483648
    run kube-apiserver "$kube" kube-apiserver --etcd-servers http://127.0.0.1:2379 \
        --advertise-address "$node_ip" --bind-address 0.0.0.0 --secure-port 6443 \
        --service-cluster-ip-range "$service_cidr" --allow-privileged=true \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
        --client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
        --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
        --kubelet-preferred-address-types InternalIP \
        --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
        --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
        --requestheader-extra-headers-prefix X-Remote-Extra- --requestheader-group-headers X-Remote-Group \
        --requestheader-username-headers X-Remote-User --enable-aggregator-routing=true \
        --profiling=false --event-ttl 2h
    forward forward "$port" "$node_ip:6443" TORCHDECK_KUBE_PORT
    wait_for 60 "the API server" kubectl get --raw /readyz
    # what kubeadm's init binds: the API server's kubelet client may use the kubelet's API (logs,
    # exec, metrics), and admin.conf's group is cluster-admin
    kubectl create clusterrolebinding kubeadm:apiserver-kubelet-client --clusterrole system:kubelet-api-admin \
        --user kube-apiserver-kubelet-client >/dev/null
    kubectl create clusterrolebinding kubeadm:cluster-admins --clusterrole cluster-admin \
        --group kubeadm:cluster-admins >/dev/null
    run kube-controller-manager "$kube" kube-controller-manager --kubeconfig "$pki/controller-manager.conf" \
        --authentication-kubeconfig "$pki/controller-manager.conf" --authorization-kubeconfig "$pki/controller-manager.conf" \
        --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
        --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
        --root-ca-file "$pki/ca.crt" --service-account-private-key-file "$pki/sa.key" \
        --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --service-cluster-ip-range "$service_cidr" \
        --controllers '*,bootstrapsigner,tokencleaner' --profiling=false
    run kube-scheduler "$kube" kube-scheduler --kubeconfig "$pki/scheduler.conf" \
        --authentication-kubeconfig "$pki/scheduler.conf" --authorization-kubeconfig "$pki/scheduler.conf" \
        --bind-address 127.0.0.1 --leader-elect=false --profiling=false
}

start_node() {
    local conf="$state/node"
    mkdir -p "$conf/cni" "$state/containerd" "$state/kubelet" "$state/pod-logs" "$cache/containerd-root"
    cat >"$conf/cni/10-bridge.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "torchdeck", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$state/cni-ipam", "ranges": [[{"subnet": "$pod_cidr", "gateway": "$node_ip"}]],
            "routes": [{"dst": "$pod_cidr"}, {"dst": "$service_cidr"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
    cat >"$conf/containerd.toml" <<EOF
version = 3
root = "$cache/containerd-root"
state = "$state/containerd/state"
[cgroup]
  path = "/$cgroup_root/containerd"
[grpc]
  address = "$state/containerd/containerd.sock"
[ttrpc]
  address = "$state/containerd/containerd.sock.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '$pause_image'
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = '$runc_bin/runc'
    Root = '$state/containerd/runc'
    SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['$cni_bin']
    conf_dir = '$conf/cni'
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
[plugins.'io.containerd.nri.v1.nri']
  disable = true
EOF
    PATH="$containerd_bin:$runc_bin:$PATH" run containerd "$containerd_bin/containerd" --config "$conf/containerd.toml"
    wait_for 30 containerd "${ctr[@]}" version
    # the two small images, packed and imported at every start (a second or less; a changed one retags)
    python3 "$here/cluster/pack-image" "$pause_image" /pause "$pause_bin/pause=/pause" \
        | "${ctr[@]}" images import - >/dev/null 2>&1
    python3 "$here/cluster/pack-image" "$init_image" /bin/sh /bin/busybox=/bin/busybox \
            /bin/sh-\>busybox /bin/nslookup-\>busybox /bin/seq-\>busybox /bin/sleep-\>busybox /bin/echo-\>busybox /bin/sed-\>busybox \
        | "${ctr[@]}" images import - >/dev/null 2>&1
    cat >"$conf/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $state/pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup_root
failSwapOn: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://$state/containerd/containerd.sock
podLogsDir: $state/pod-logs
clusterDomain: cluster.local
clusterDNS: [$node_ip]
resolvConf: $conf/resolv.conf
address: $node_ip
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMinimumGCAge: 87600h
serializeImagePulls: false
localStorageCapacityIsolation: false
EOF
    echo "nameserver $node_ip" >"$conf/resolv.conf"
    run kubelet "$kube" kubelet --config "$conf/kubelet.yaml" --kubeconfig "$state/pki/kubelet.conf" \
        --root-dir "$state/kubelet" --cert-dir "$state/kubelet-pki" --node-ip "$node_ip" --hostname-override "$node"
    cat >"$conf/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $state/pki/super-admin.conf}
mode: iptables
clusterCIDR: $pod_cidr
hostnameOverride: $node
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
    run kube-proxy "$kube" kube-proxy --config "$conf/kube-proxy.yaml"
    wait_for 90 "the node" node_ready
}

start_registry() { # the registry the images reach the node through: its layers kept in the cache, so a
    # rebuilt image moves only the layers it does not hold yet, and the node's containerd pulls only those
    mkdir -p "$cache/registry"
    cat >"$state/node/registry.yml" <<EOF
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $cache/registry}
  maintenance: {uploadpurging: {enabled: false}}
http: {addr: "127.0.0.1:5000"}
EOF
    run registry "$registry_bin/registry" serve "$state/node/registry.yml"
    forward registry-forward "$registry_port" 127.0.0.1:5000 TORCHDECK_REGISTRY_PORT
    wait_for 30 "the registry" curl -fsS "http://127.0.0.1:$registry_port/v2/"
}

node_ready() { [ "$(kubectl get node "$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; }

start_addons() {
    local pki="$state/pki" conf="$state/node" crds metrics
    # CoreDNS out of the cluster, answering for cluster.local on the node's address (pods' resolver)
    cat >"$conf/Corefile" <<EOF
.:53 {
    bind $node_ip
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $pki/super-admin.conf
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
EOF
    run coredns "$coredns_bin/coredns" -conf "$conf/Corefile"
    # metrics-server out of the cluster, reached by the API server's aggregator through a Service
    # without a selector whose endpoint is the node's address: its own APIService and RBAC objects
    metrics="$(module_dir "sigs.k8s.io/metrics-server@$METRICS_SERVER")/manifests/base"
    run metrics-server "$metrics_bin/metrics-server" --kubeconfig "$pki/super-admin.conf" \
        --authentication-kubeconfig "$pki/super-admin.conf" --authorization-kubeconfig "$pki/super-admin.conf" \
        --bind-address "$node_ip" --secure-port 4443 --cert-dir "$state/metrics-server" \
        --kubelet-insecure-tls --kubelet-preferred-address-types InternalIP --metric-resolution 15s
    kubectl apply -f "$metrics/rbac.yaml" -f "$metrics/apiservice.yaml" >/dev/null
    outside_service kube-system metrics-server 443:4443
    # the Training Operator out of the cluster: its CRDs and validating webhook from its own module; its
    # webhook certificates in a /tmp of its own (it writes them to a fixed path there)
    crds="$(module_dir "github.com/kubeflow/training-operator@$TRAINING_OPERATOR")/manifests/base"
    kubectl create namespace kubeflow >/dev/null
    # its PyTorchJob CRD only: mpijobs.kubeflow.org is the MPI Operator's (v2beta1), as Kubeflow installs them together
    kubectl apply --server-side -f "$crds/crds/kubeflow.org_pytorchjobs.yaml" >/dev/null
    kubectl -n kubeflow create secret generic training-operator-webhook-cert >/dev/null
    outside_service kubeflow training-operator 443:9443
    python3 - "$crds/webhook/manifests.yaml" <<'EOF' | kubectl apply -f - >/dev/null
import sys
text = open(sys.argv[1]).read()
# what the operator's kustomization does to its webhook: name it as the operator expects, point it at
# the operator's Service
text = text.replace("name: validating-webhook-configuration", "name: validator.training-operator.kubeflow.org")
text = text.replace("name: webhook-service", "name: training-operator").replace("namespace: system", "namespace: kubeflow")
print(text)
EOF
    mkdir -p "$state/operator-tmp"
    # the operator's own init container (wait until the master's name resolves), with one change: the
    # name asked is the master's full name in the pod's namespace. Debian's static busybox nslookup
    # fails when any search domain answers NXDOMAIN (as svc.cluster.local rightly does), where the
    # Alpine busybox of upstream's default image does not.
    cat >"$conf/pytorch-init-container.yaml" <<'EOF'
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'domain=$(sed -n "s/^search \([^ ]*\).*/\1/p" /etc/resolv.conf); err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}.$domain.; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']
EOF
    run training-operator unshare --mount --propagation private sh -c \
        "mount --bind '$state/operator-tmp' /tmp && exec env MY_POD_NAMESPACE=kubeflow KUBECONFIG='$pki/super-admin.conf' \
         '$operator_bin/training-operator.v1' --metrics-bind-address 127.0.0.1:8088 --health-probe-bind-address 127.0.0.1:8081 \
         --enable-scheme pytorchjob \
         --pytorch-init-container-image '$init_image' --pytorch-init-container-template-file '$conf/pytorch-init-container.yaml'"
    # in a cluster the kubelet mounts the certificate Secret the operator fills where it reads its
    # certificates; out of one, this does: the operator waits for those files before it starts
    wait_for 60 "the Training Operator's webhook certificate" webhook_certificate
    wait_for 60 "the Training Operator's certificate files" copy_webhook_certificate \
        "$state/operator-tmp/k8s-webhook-server/serving-certs"
    wait_for 60 "metrics.k8s.io" api_available v1beta1.metrics.k8s.io
    wait_for 60 "the Training Operator" operator_ready
}

# ---- the other controllers: JobSet, Kubeflow Trainer v2, the MPI Operator, Kueue ------------------
# Each runs out of the cluster with the super-admin kubeconfig, its CRDs and webhook configurations
# from its own module. Their webhooks are served on the node's address with certificates from a CA
# this script makes (the controllers' own certificate rotation is off), reached through a Service
# whose endpoint is the node, as the Training Operator's.

make_webhook_ca() {
    local dir="$state/pki/webhooks"
    mkdir -p "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=torchdeck-webhook-ca" \
        -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
}

serving_certs() { # serving_certs NAME NAMESPACE: a certificate for the Service NAME.NAMESPACE.svc in a
    # folder mounted as that controller's /tmp (controller-runtime reads
    # /tmp/k8s-webhook-server/serving-certs/tls.{crt,key}); prints the folder
    local ca="$state/pki/webhooks" tmp="$state/$1-tmp"
    local dir="$tmp/k8s-webhook-server/serving-certs"
    mkdir -p "$dir"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$1.$2.svc" -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
    printf 'subjectAltName=DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local,IP:%s\n' "$1" "$2" "$1" "$2" "$node_ip" >"$dir/ext"
    openssl x509 -req -in "$dir/tls.csr" -CA "$ca/ca.crt" -CAkey "$ca/ca.key" -CAcreateserial -days 30 \
        -extfile "$dir/ext" -out "$dir/tls.crt" 2>/dev/null
    cp "$ca/ca.crt" "$dir/ca.crt"
    echo "$tmp"
}

webhooks() { # webhooks NAMESPACE SERVICE NAME_PREFIX FILE_OR_KUSTOMIZATION: the module's webhook
    # configurations, pointed at SERVICE in NAMESPACE and trusting the script's CA
    local source="$4"
    { if [ -d "$source" ]; then kubectl kustomize "$source"; else cat "$source"; fi; } | python3 -c '
import base64, sys, yaml
namespace, service, prefix, ca = sys.argv[1:5]
bundle = base64.b64encode(open(ca, "rb").read()).decode()
out = []
for doc in yaml.safe_load_all(sys.stdin):
    if not doc or not doc.get("kind", "").endswith("WebhookConfiguration"):
        continue
    name = doc["metadata"]["name"]
    doc["metadata"] = {"name": name if name.startswith(prefix) else prefix + name}
    for hook in doc.get("webhooks", []):
        hook["clientConfig"]["caBundle"] = bundle
        hook["clientConfig"]["service"].update(name=service, namespace=namespace)
    out.append(doc)
print(yaml.safe_dump_all(out))
' "$1" "$2" "$3" "$state/pki/webhooks/ca.crt" | kubectl apply -f - >/dev/null
}

kueue_frameworks=(batch/job kubeflow.org/pytorchjob kubeflow.org/mpijob jobset.x-k8s.io/jobset trainer.kubeflow.org/trainjob)
# (the integrations torchdeck submits; Kueue's own default leaves kubeflow.org/pytorchjob out from v0.19)

kueue_config() { # kueue_config FRAMEWORK...: Kueue's configuration with these integrations, as the file
    # it runs with and as the ConfigMap its manifests install (kueue-system/kueue-manager-config), where
    # a user may read which job kinds it manages
    local conf="$state/node" frameworks
    frameworks="$(IFS=,; echo "$*")"
    cat >"$conf/kueue.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health: {healthProbeBindAddress: "127.0.0.1:8086"}
metrics: {bindAddress: "0"}
webhook: {port: 9446}
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
integrations:
  frameworks: [$frameworks]
EOF
    kubectl -n kueue-system create configmap kueue-manager-config \
        --from-file=controller_manager_config.yaml="$conf/kueue.yaml" --dry-run=client -o yaml \
        | kubectl apply --server-side --force-conflicts -f - >/dev/null
}

upstream_kueue_frameworks() { # the integrations Kueue's own manifests enable (uncommented in its
    # config/components/manager/controller_manager_config.yaml), one a line
    awk '/^integrations:/ {i = 1; next} i && /^  frameworks:/ {f = 1; next} f && /^[^ ]/ {exit}
         f && /^  - "/ {s = $0; sub(/^  - "/, "", s); sub(/".*/, "", s); print s}' \
        "$(module_dir "sigs.k8s.io/kueue@$KUEUE")/config/components/manager/controller_manager_config.yaml"
}

kueue_integrations() { # kueue_integrations default|torchdeck: run Kueue again with its own default
    # integrations, or with those torchdeck submits (what start gives it)
    local pki="$state/pki" conf="$state/node" list=()
    [ -f "$state/kubeconfig" ] || missing "not started"
    case "${1:-}" in
        default) mapfile -t list < <(upstream_kueue_frameworks) ;;
        torchdeck) list=("${kueue_frameworks[@]}") ;;
        *) echo "usage: $0 kueue-integrations default|torchdeck" >&2; exit 2 ;;
    esac
    [ "${#list[@]}" -gt 0 ] || missing "no integrations read from Kueue $KUEUE's own configuration"
    kueue_config "${list[@]}"
    end kueue
    run_with_certs kueue "$state/kueue-webhook-service-tmp" "$kueue_bin/kueue" --config "$conf/kueue.yaml" \
        --kubeconfig "$pki/super-admin.conf"
    wait_for 60 "Kueue" healthy 8086
    say "Kueue runs with: ${list[*]}"
}

run_with_certs() { # run_with_certs NAME TMP COMMAND...: run NAME with TMP mounted as its own /tmp
    local name="$1" tmp="$2"
    shift 2
    run "$name" unshare --mount --propagation private sh -c "mount --bind '$tmp' /tmp && exec \"\$@\"" sh "$@"
}

run_as_pod() { # run_as_pod NAME TMP NAMESPACE SERVICE_ACCOUNT COMMAND...: as run_with_certs, and what
    # the kubelet gives a pod: the service account's token, namespace and CA in
    # /var/run/secrets/kubernetes.io/serviceaccount, and the cluster's DNS in /etc/resolv.conf
    local name="$1" tmp="$2" namespace="$3" account="$4" sa="$state/$1-serviceaccount"
    shift 4
    mkdir -p "$sa"
    kubectl -n "$namespace" create serviceaccount "$account" >/dev/null
    kubectl -n "$namespace" create token "$account" --duration 720h >"$sa/token"
    echo -n "$namespace" >"$sa/namespace"
    cp "$state/pki/ca.crt" "$sa/ca.crt"
    printf 'nameserver %s\nsearch %s.svc.cluster.local svc.cluster.local cluster.local\n' "$node_ip" "$namespace" >"$sa/resolv.conf"
    run "$name" unshare --mount --propagation private sh -c "mount --bind '$tmp' /tmp && mount -t tmpfs tmpfs /run \
        && mkdir -p /run/secrets/kubernetes.io/serviceaccount && mount --bind '$sa' /run/secrets/kubernetes.io/serviceaccount \
        && mount --bind '$sa/resolv.conf' /etc/resolv.conf && exec \"\$@\"" sh "$@"
}

crd_established() { [ "$(kubectl get crd "$1" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}')" = True ]; }
mpi_leading() { running mpi-operator && [ -n "$(kubectl -n mpi-operator get lease -o 'jsonpath={.items[*].spec.holderIdentity}')" ]; }
healthy() { in_ns curl -fsS "http://127.0.0.1:$1/readyz" >/dev/null; }

start_controllers() {
    local pki="$state/pki" conf="$state/node" tmp tmp2 dir trainer_dir
    make_webhook_ca
    # JobSet: Trainer v2 makes one per TrainJob
    dir="$(module_dir "sigs.k8s.io/jobset@$JOBSET")/config/components"
    kubectl create namespace jobset-system >/dev/null
    kubectl apply --server-side -k "$dir/crd" >/dev/null
    outside_service jobset-system jobset-webhook-service 443:9444
    webhooks jobset-system jobset-webhook-service jobset- "$dir/webhook/manifests.yaml"
    cat >"$conf/jobset.yaml" <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {port: 9444}
health: {healthProbeBindAddress: "127.0.0.1:8084"}
metrics: {bindAddress: "0"}
EOF
    tmp="$(serving_certs jobset-webhook-service jobset-system)"
    run_with_certs jobset "$tmp" env KUBECONFIG="$pki/super-admin.conf" "$jobset_bin/jobset" --config "$conf/jobset.yaml" \
        --zap-devel=false
    # Kubeflow Trainer v2 with the TrainJobStatus gate: its status server (port 10443) behind the
    # Service and certificate of its webhooks, as upstream deploys it, and the Secret it reads the CA from
    trainer_dir="$(module_dir "github.com/kubeflow/trainer/v2@$TRAINER")/manifests/base"
    kubectl create namespace kubeflow-system >/dev/null
    kubectl apply --server-side -k "$trainer_dir/crds" >/dev/null
    tmp="$(serving_certs kubeflow-trainer-controller-manager kubeflow-system)"
    kubectl -n kubeflow-system create secret generic kubeflow-trainer-webhook-cert \
        --from-file="$tmp/k8s-webhook-server/serving-certs/ca.crt" --from-file="$tmp/k8s-webhook-server/serving-certs/tls.crt" \
        --from-file="$tmp/k8s-webhook-server/serving-certs/tls.key" >/dev/null
    outside_service kubeflow-system kubeflow-trainer-controller-manager 443:9445 10443:10443
    webhooks kubeflow-system kubeflow-trainer-controller-manager "" "$trainer_dir/webhook"
    cat >"$conf/trainer.yaml" <<EOF
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health: {healthProbeBindAddress: "127.0.0.1:8085", readinessEndpointName: readyz, livenessEndpointName: healthz}
metrics: {bindAddress: "0"}
webhook: {port: 9445}
leaderElection: {leaderElect: false}
certManagement: {enable: false, webhookServiceName: kubeflow-trainer-controller-manager, webhookSecretName: kubeflow-trainer-webhook-cert}
statusServer: {port: 10443}
featureGates: {TrainJobStatus: true}
EOF
    # (its status server reads the cluster's token issuer from its own service account token)
    run_as_pod trainer "$tmp" kubeflow-system kubeflow-trainer-controller-manager \
        env KUBECONFIG="$pki/super-admin.conf" "$trainer_bin/trainer-controller-manager" \
        --config "$conf/trainer.yaml"
    # the MPI Operator (v2beta1): no webhook; it elects a leader in its lock namespace and serves its
    # health check on :8080 (fixed)
    dir="$(module_dir "github.com/kubeflow/mpi-operator@$MPI_OPERATOR")"
    kubectl create namespace mpi-operator >/dev/null
    kubectl apply --server-side -f "$dir/manifests/base/kubeflow.org_mpijobs.yaml" >/dev/null
    # (it exits at once where the CRD is not served yet)
    wait_for 30 "the MPIJob CRD" crd_established mpijobs.kubeflow.org
    run mpi-operator "$mpi_bin/mpi-operator" --kubeConfig "$pki/super-admin.conf" --lock-namespace mpi-operator \
        --monitoring-port 0 --kube-api-qps 50 --kube-api-burst 100
    # Kueue with the integrations torchdeck submits, and its visibility API (pending positions)
    dir="$(module_dir "sigs.k8s.io/kueue@$KUEUE")/config/components"
    kubectl create namespace kueue-system >/dev/null
    kubectl apply --server-side -k "$dir/crd" >/dev/null
    outside_service kueue-system kueue-webhook-service 443:9446
    outside_service kueue-system visibility-server 443:8082
    webhooks kueue-system kueue-webhook-service kueue- "$dir/webhook/manifests.yaml"
    kubectl apply -f "$dir/visibility/apiservice_v1beta2.yaml" -f "$dir/visibility/apiservice_v1beta1.yaml" >/dev/null
    kueue_config "${kueue_frameworks[@]}"
    tmp="$(serving_certs kueue-webhook-service kueue-system)"
    # with its certificate rotation off, Kueue reads its metrics server's certificate from a fixed path
    # and its visibility server's (the APIService skips verifying it, as upstream's does)
    tmp2="$(serving_certs visibility-server kueue-system)"
    place_fixed /visibility "$tmp2"/k8s-webhook-server/serving-certs/tls.{crt,key}
    place_fixed /etc/kueue/metrics/certs "$tmp"/k8s-webhook-server/serving-certs/tls.{crt,key}
    # (--kubeconfig, not KUBECONFIG: its visibility server delegates authentication to the cluster through it)
    run_with_certs kueue "$tmp" "$kueue_bin/kueue" --config "$conf/kueue.yaml" --kubeconfig "$pki/super-admin.conf"
    wait_for 60 "JobSet" healthy 8084
    wait_for 60 "Kubeflow Trainer" healthy 8085
    wait_for 60 "Kueue" healthy 8086
    wait_for 60 "the MPI Operator" mpi_leading
    wait_for 60 "Kueue's visibility API" api_available v1beta2.visibility.kueue.x-k8s.io
    # the Trainer's torch runtime, as its manifests/base/runtimes install it (once its webhook answers)
    kubectl apply --server-side -f "$trainer_dir/runtimes/torch_distributed.yaml" >/dev/null
}

outside_service() { # outside_service NAMESPACE NAME PORT:TARGET_PORT...: a Service whose endpoint is
    # the node (v1 Endpoints, which the API server's aggregator and webhooks resolve; the controller
    # mirrors them into EndpointSlices), one port per pair
    local namespace="$1" name="$2" pair service_ports="" endpoint_ports=""
    shift 2
    for pair in "$@"; do
        service_ports+="{name: p${pair#*:}, port: ${pair%:*}, targetPort: ${pair#*:}}, "
        endpoint_ports+="{name: p${pair#*:}, port: ${pair#*:}}, "
    done
    kubectl apply -f - 2>&1 >/dev/null <<EOF | grep -v "v1 Endpoints is deprecated" >&2 || true
apiVersion: v1
kind: Service
metadata: {name: $name, namespace: $namespace}
spec: {ports: [${service_ports%, }]}
---
apiVersion: v1
kind: Endpoints
metadata: {name: $name, namespace: $namespace}
subsets: [{addresses: [{ip: $node_ip}], ports: [${endpoint_ports%, }]}]
EOF
}

api_available() { [ "$(kubectl get apiservice "$1" -o 'jsonpath={.status.conditions[?(@.type=="Available")].status}')" = True ]; }
webhook_certificate() { [ -n "$(kubectl -n kubeflow get secret training-operator-webhook-cert -o 'jsonpath={.data.tls\.key}')" ]; }

copy_webhook_certificate() { # copy_webhook_certificate DIR: the Secret's three files from one read of it,
    # each written whole (a rename) and tls.crt last: the operator starts its webhook server as soon as
    # tls.crt exists, and its rotator may still rewrite the Secret (two reconciles race), so the copy
    # succeeds only when the Secret, read again, still holds what was copied
    local dir="$1" before after
    mkdir -p "$dir"
    before="$(kubectl -n kubeflow get secret training-operator-webhook-cert -o json)" || return 1
    python3 - "$dir" "$before" <<'EOF' || return 1
import base64, json, os, sys
folder, secret = sys.argv[1], json.loads(sys.argv[2])
data = secret.get("data") or {}
if not all(data.get(key) for key in ("ca.crt", "tls.key", "tls.crt")):
    sys.exit(1)
for key in ("ca.crt", "tls.key", "tls.crt"):
    path = os.path.join(folder, key)
    with open(path + ".new", "wb") as file:
        file.write(base64.b64decode(data[key]))
    os.replace(path + ".new", path)
EOF
    sleep 1
    after="$(kubectl -n kubeflow get secret training-operator-webhook-cert -o 'jsonpath={.metadata.resourceVersion}')" || return 1
    [ "$after" = "$(printf '%s' "$before" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')" ]
}
operator_ready() { in_ns curl -fsS http://127.0.0.1:8081/readyz; }

start() {
    [ "$(uname -s)" = Linux ] || missing "not Linux"
    [ "$(id -u)" = 0 ] || missing "not root (the kubelet and containerd need it)"
    if status >/dev/null 2>&1; then
        echo "KUBECONFIG=$state/kubeconfig"
        return 0
    fi
    stop
    build
    local started=$SECONDS
    private_dir "$state" "$state/logs" "$state/pids"
    remember_host
    make_namespace
    make_pki
    start_control_plane
    start_node
    start_registry
    start_addons
    start_controllers
    cp -r "$state/logs/." "$cache/last-logs/" 2>/dev/null || true
    say "up in $((SECONDS - started)) s: Kubernetes $KUBERNETES, containerd $CONTAINERD, Training Operator $TRAINING_OPERATOR, JobSet $JOBSET, Trainer $TRAINER, MPI Operator $MPI_OPERATOR, Kueue $KUEUE"
    echo "KUBECONFIG=$state/kubeconfig"
}

components=(etcd kube-apiserver forward kube-controller-manager kube-scheduler containerd kubelet kube-proxy registry registry-forward
    coredns metrics-server training-operator jobset trainer mpi-operator kueue)

status() {
    local name down=0
    [ -d "$state/pids" ] || { echo "stopped"; return 1; }
    for name in "${components[@]}"; do
        if running "$name"; then echo "$name running"; else echo "$name down"; down=1; fi
    done
    return $down
}

# ---- stop -----------------------------------------------------------------------------------------

end() { # end NAME...: the components still running as started: SIGTERM, then SIGKILL after 15 s (the
    # API server drains for ~8 s); a pid file whose pid is now another process's is passed over
    local name files=()
    for name in "$@"; do files+=("$state/pids/$name"); done
    stop_owned 15 "${files[@]}"
}

cgroups() { # cgroups [CGROUP]: the folders of CGROUP (by default all) under the cluster's own cgroup
    # root, in every hierarchy, deepest first
    local hierarchy top
    while read -r hierarchy; do
        top="$hierarchy/$cgroup_root${1:+/$1}"
        if [ -d "$top" ]; then find "$top" -type d; fi
    done < <(cgroup_hierarchies) | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2-
}

kill_cgroup() { # kill_cgroup CGROUP [PID]: SIGKILL every process in the cluster's CGROUP but PID, until none is left
    local pid pids
    for _ in $(seq 50); do
        mapfile -t pids < <(cgroups "$1" | sed 's#$#/cgroup.procs#' | xargs -r cat 2>/dev/null | sort -u | grep -vx "${2:-0}")
        [ ${#pids[@]} = 0 ] && return 0
        for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
        sleep 0.2
    done
}

our_mounts() { # the mounts the cluster made, deepest first: where it mounts, not in the table at start;
    # with no table (a start cut short before it), only those under its own folders
    if [ -f "$state/mounts-before" ]; then mounts_since "$state/mounts-before" "${mount_roots[@]}"
    else mounts_since /dev/null "$state" "$cache/containerd-root"; fi
}

remove_made() { # remove_made PATH: a fixed path start made, unless something is still mounted under it
    if mounts_since /dev/null "$1" | grep -q .; then say "kept $1: something is still mounted under it"; return 0; fi
    rm -rf --one-file-system "$1"
}

stop() {
    [ "$(id -u)" = 0 ] || missing "not root"
    end kueue mpi-operator trainer jobset training-operator metrics-server coredns registry-forward registry kube-proxy \
        kube-scheduler kube-controller-manager kubelet forward
    # every process in the pods' cgroups (the containers), then the shims beside containerd in its
    # cgroup, then containerd; then whatever is left under the cluster's cgroup root
    local containerd mount kind name value groups
    containerd="$(owned_pid "$state/pids/containerd")" || containerd=0
    kill_cgroup kubepods
    kill_cgroup containerd "$containerd"
    end containerd kube-apiserver etcd
    kill_cgroup ""
    while read -r mount; do
        mount="$(unescape_mount "$mount")"
        umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null || true
    done < <(our_mounts)
    for _ in $(seq 25); do
        mapfile -t groups < <(cgroups)
        [ ${#groups[@]} = 0 ] && break
        for name in "${groups[@]}"; do rmdir "$name" 2>/dev/null || true; done
        sleep 0.2
    done
    ip netns del "$ns" 2>/dev/null || true
    if [ -f "$state/before" ]; then
        while read -r kind name value; do
            case "$kind" in
                sysctl) sysctl -qw "$name=$value" ;;
                made) remove_made "$name" ;;
            esac
        done <"$state/before"
    fi
    if [ -d "$state/logs" ]; then rm -rf "$cache/last-logs" && cp -r "$state/logs" "$cache/last-logs"; fi
    if mounts_since /dev/null "$state" | grep -q .; then missing "something is still mounted under $state"; fi
    rm -rf --one-file-system "$state"
}

load() { # load IMAGE...: the Docker images the node's containerd does not hold yet, through the registry:
    # docker pushes the layers it lacks (a changed image: its top layers), containerd pulls what it lacks
    # and names the image as docker does
    [ $# -gt 0 ] || { echo "usage: $0 load IMAGE..." >&2; exit 2; }
    running registry || missing "not started (the registry is part of the cluster)"
    local image id ref named by_id path refs=()
    for image in "$@"; do
        id="$(docker image inspect --format '{{.Id}}' "$image")" || missing "docker has no image $image"
        # containerd names it as docker's reference does in full, and keeps docker's image id as a name too
        ref="$image"
        case "$ref" in */*) ;; *) ref="library/$ref" ;; esac
        case "${ref%%/*}" in *.*|*:*|localhost) ;; *) ref="docker.io/$ref" ;; esac
        refs+=("$ref")
        named="$("${ctr[@]}" images ls "name==$ref" 2>/dev/null | awk 'NR > 1 {print $3}')"
        by_id="$("${ctr[@]}" images ls "name==$id" 2>/dev/null | awk 'NR > 1 {print $3}')"
        [ -n "$named" ] && [ "$named" = "$by_id" ] && continue
        path="${ref#*/}" # the repository and tag without the registry's name
        docker tag "$image" "127.0.0.1:$registry_port/$path"
        docker push -q "127.0.0.1:$registry_port/$path" >/dev/null || missing "docker could not push $image to the registry"
        docker rmi --no-prune "127.0.0.1:$registry_port/$path" >/dev/null
        # the pull runs in containerd (its transfer service), in the namespace where the registry listens
        "${ctr[@]}" images pull --plain-http "127.0.0.1:5000/$path" >/dev/null \
            || missing "containerd could not pull $path from the registry"
        "${ctr[@]}" images tag --force "127.0.0.1:5000/$path" "$ref" >/dev/null
        "${ctr[@]}" images rm "127.0.0.1:5000/$path" >/dev/null
    done
    for ref in "${refs[@]}"; do
        [ -n "$("${ctr[@]}" images ls -q "name==$ref" 2>/dev/null)" ] || missing "containerd did not take $ref"
        prune "${ref%:*}"
    done
}

prune() { # prune REPOSITORY: the node keeps no image of REPOSITORY that docker no longer holds (its
    # layers, several GB each, go with the last name that holds them); docker's id names go with them
    local name digest short
    local -A kept=() gone=()
    while read -r name digest; do
        short="${name#docker.io/}"
        short="${short#library/}"
        if docker image inspect "$short" >/dev/null 2>&1; then kept[$digest]=1; else
            gone[$digest]=1
            "${ctr[@]}" images rm "$name" >/dev/null 2>&1 || true
        fi
    done < <("${ctr[@]}" images ls 2>/dev/null | awk -v r="$1:" 'NR > 1 && index($1, r) == 1 {print $1, $3}')
    while read -r name digest; do
        [ -n "${gone[$digest]:-}" ] && [ -z "${kept[$digest]:-}" ] && { "${ctr[@]}" images rm "$name" >/dev/null 2>&1 || true; }
    done < <("${ctr[@]}" images ls 2>/dev/null | awk 'NR > 1 && $1 ~ /^sha256:/ {print $1, $3}')
    return 0
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    kubeconfig) if [ -f "$state/kubeconfig" ]; then echo "$state/kubeconfig"; else missing "not started"; fi ;;
    load) shift; load "$@" ;;
    ctr) shift; exec "${ctr[@]}" "$@" ;;
    kubectl) shift; [ -f "$state/kubeconfig" ] || missing "not started"; exec "$kube" kubectl --kubeconfig "$state/kubeconfig" "$@" ;;
    build) build ;;
    kueue-integrations) shift; kueue_integrations "$@" ;;
    *) echo "usage: $0 start|stop|status|kubeconfig|load IMAGE...|kubectl ARGS|ctr ARGS|build|kueue-integrations default|torchdeck" >&2; exit 2 ;;
esac
