#!/bin/sh
# torchdeck image build --mpi: what an MPIJob's pods need (Kubeflow's MPI Operator v2), as the
# operator's own images have it (its build/base Dockerfile): OpenMPI's mpirun and orted, and an SSH
# server that runs as the image's user on port 2222, its host key the job's own key, which the
# operator mounts in ~/.ssh. Debian's packages come from the mirror, or, where the build is served a
# package folder (--torch-wheels DIR holding them and their Packages index: scripts/fetch-debs.sh),
# from that folder only.
set -eu
packages="openmpi-bin openssh-server openssh-client"
export DEBIAN_FRONTEND=noninteractive
if [ -n "${PIP_FIND_LINKS:-}" ]; then
    echo "deb [trusted=yes] ${PIP_FIND_LINKS} ./" > /etc/apt/torchdeck.list
    set -- -o Dir::Etc::SourceList=/etc/apt/torchdeck.list -o Dir::Etc::SourceParts=/nonexistent
else
    set --
fi
apt-get "$@" update -q
# shellcheck disable=SC2086 # the package names are words
apt-get "$@" install -y -q --no-install-recommends $packages
rm -rf /var/lib/apt/lists/* /etc/apt/torchdeck.list
# ssh to the other pods without asking (their keys are the job's, mounted read-only), on their port
sed -i 's/^#* *StrictHostKeyChecking .*/    StrictHostKeyChecking no/; s/^#* *Port .*/    Port 2222/' /etc/ssh/ssh_config
grep -q '^ *StrictHostKeyChecking no' /etc/ssh/ssh_config || echo '    StrictHostKeyChecking no' >> /etc/ssh/ssh_config
grep -q '^ *Port 2222' /etc/ssh/ssh_config || echo '    Port 2222' >> /etc/ssh/ssh_config
echo '    UserKnownHostsFile /dev/null' >> /etc/ssh/ssh_config
echo '    LogLevel ERROR' >> /etc/ssh/ssh_config
install -m 0644 /opt/torchdeck/mpi/sshd_config /etc/ssh/sshd_config.torchdeck
# mpirun starts orted on each worker through ssh, which runs it with the user's shell
usermod --shell /bin/sh trainer
