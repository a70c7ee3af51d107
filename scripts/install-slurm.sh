#!/usr/bin/env bash
# Installs what the Slurm tests (tests/e2e/test_slurm.py) need from Debian's packages: the
# controller and node daemons, the client commands and munge. Idempotent: does nothing when
# all are present. Needs root (CI runs it before the tests). The packages' own services are
# not used: the tests start a private cluster (devstack/slurm.py).
set -euo pipefail

packages=(slurm-wlm slurmctld slurmd slurm-client munge)
missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-slurm: missing ${missing[*]}; run as root (apt-get install)" >&2
  exit 1
fi
echo "install-slurm: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
slurmctld -V >&2
