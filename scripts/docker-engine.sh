#!/usr/bin/env bash
# A real Docker engine for the image tests (tests/image/), on a machine that allows one: root,
# Linux, Debian's packages reachable. `start` installs docker.io and debootstrap where they are
# missing, starts dockerd on a socket of its own (no bridge, no iptables changes: builds and runs use
# the host's network), and makes the base image the Dockerfiles start from, python:3.11.10-slim-bookworm,
# from Debian's mirror with debootstrap: the one stand-in left, for the registry this machine cannot
# reach (Debian's python3 with pip, this machine's CA certificates, `python` on the PATH, pip free to
# install into it as in the official image). It prints the DOCKER_HOST to use. `stop` stops the
# engine; the packages and the engine's data (the base image, the build cache, the 12 newest torchdeck-trainer
# images: `start` removes older ones) stay for the next run.
# What the script runs as root it logs in $own/logs, a folder only root reads (a fixed name in /tmp
# may be anyone's symlink), and `stop` signals only the dockerd it started: the pid and start time
# it recorded (scripts/cluster/owned.sh), never a pid that is now another process's.
# Anything missing prints one line starting "torchdeck: no engine:" and exits 3.
set -euo pipefail
# shellcheck source=scripts/cluster/owned.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster/owned.sh"
sock=/run/torchdeck-docker.sock
data="${TORCHDECK_DOCKER_DATA:-/var/lib/torchdeck-docker}" # the engine's images and build cache (an empty folder: a cold start)
pidfile=/run/torchdeck-docker.pid # dockerd's own
own=/var/lib/torchdeck-engine     # the script's: its logs, and the dockerd it started (pid and start time)
logs="$own/logs"
base=python:3.11.10-slim-bookworm
keep=12
export DOCKER_HOST="unix://$sock"
missing() { echo "torchdeck: no engine: $*" >&2; exit 3; }

stop() {
    stop_owned 10 "$own/dockerd"
    rm -f "$own/dockerd"
    # dockerd refuses to start beside a pid file whose pid runs; one left by a dockerd that is gone
    # (the pid now another process's, or none) goes
    local pid=""
    if [ -f "$pidfile" ]; then read -r pid <"$pidfile" || true; fi
    if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ]; then rm -f "$pidfile"; fi
}

start() {
    [ "$(uname -s)" = Linux ] || missing "not Linux"
    [ "$(id -u)" = 0 ] || missing "not root (dockerd needs it)"
    private_dir "$own" "$logs"
    if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
        command -v apt-get >/dev/null || missing "no apt-get to install docker.io and debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap >"$logs/apt.log" 2>&1 \
            || { apt-get update -q >>"$logs/apt.log" 2>&1 \
                 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap >>"$logs/apt.log" 2>&1; } \
            || missing "apt-get could not install docker.io and debootstrap (log: $logs/apt.log)"
    fi
    if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
        stop
        mkdir -p "$data"
        dockerd --host "unix://$sock" --data-root "$data" --exec-root /run/torchdeck-docker --pidfile "$pidfile" \
            --storage-driver overlay2 --bridge none --iptables=false --ip-masq=false \
            >"$logs/dockerd.log" 2>&1 &
        remember_pid "$own/dockerd" $!
        for _ in $(seq 150); do
            docker version --format '{{.Server.Version}}' >/dev/null 2>&1 && break
            sleep 0.2
        done
        docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
            || missing "dockerd did not start (log: $logs/dockerd.log)"
    fi
    if ! docker image inspect "$base" >/dev/null 2>&1; then
        root="$(mktemp -d /var/tmp/torchdeck-base.XXXXXX)"
        trap 'rm -rf "$root"' EXIT
        mirror="$( (sed -n 's/^URIs: *//p; s/^deb \(http[^ ]*\) .*/\1/p' /etc/apt/sources.list.d/*.sources \
            /etc/apt/sources.list 2>/dev/null || true) | head -1)"
        debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates \
            bookworm "$root" "${mirror:-http://deb.debian.org/debian}" >"$logs/debootstrap.log" 2>&1 \
            || missing "debootstrap failed (log: $logs/debootstrap.log)"
        cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
        rm -f "$root"/usr/lib/python3.*/EXTERNALLY-MANAGED
        ln -sf python3 "$root/usr/bin/python"
        rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc "$root"/usr/share/man
        tar -C "$root" -c . | docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$base" >/dev/null
    fi
    # the newest images torchdeck built stay for the next run; older ones go (a torch layer is GBs)
    docker images --format '{{.Repository}}:{{.Tag}}' torchdeck-trainer | tail -n +$((keep + 1)) \
        | xargs -r docker rmi >/dev/null 2>&1 || true
    echo "DOCKER_HOST=$DOCKER_HOST"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
