#!/usr/bin/env bash
# fetch-debs.sh DIR PACKAGE...: Debian's packages PACKAGE and everything they depend on (this
# machine's Debian release, as the images' base is), downloaded into DIR with a Packages index, so
# that a build served DIR (torchdeck image build --torch-wheels DIR --mpi) installs them with apt
# from there and reaches no mirror. Alternatives are all fetched: apt picks among them in the build.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DIR PACKAGE..." >&2; exit 2; }
dir="$1"
shift
if ! command -v apt-get >/dev/null || ! command -v dpkg-scanpackages >/dev/null; then
    echo "torchdeck: fetch-debs needs apt-get and dpkg-scanpackages (Debian's dpkg-dev)" >&2
    exit 3
fi
mkdir -p "$dir"
cd "$dir"
names="$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$@" | grep -E '^[a-z0-9]' | sort -u)"
for name in $names; do  # one at a time: a virtual name has no file and is skipped
    ls "${name}"_*.deb >/dev/null 2>&1 || apt-get download -q "$name" >/dev/null 2>&1 || true
done
for name in "$@"; do
    ls "${name}"_*.deb >/dev/null 2>&1 || { echo "torchdeck: apt-get could not download $name" >&2; exit 1; }
done
dpkg-scanpackages --multiversion . /dev/null 2>/dev/null > Packages.tmp && mv Packages.tmp Packages
debs=(./*.deb)
echo "${#debs[@]} packages in $dir"
