#!/usr/bin/env bash
# Installs what the Slurm tests (tests/e2e/test_slurm.py) need from Debian's packages: the
# controller and node daemons, the client commands and munge, and for accounting (sacct)
# slurmdbd and a MariaDB server. Idempotent: does nothing when all are present. Needs root (CI
# runs it before the tests). The packages' own services are not used: the tests start a
# private cluster (devstack/slurm.py) with a private database (devstack/slurm_accounting.py).
set -euo pipefail
cd "$(dirname "$0")"
./install-debian-packages.sh install-slurm slurm-wlm slurmctld slurmd slurm-client munge \
  slurmdbd mariadb-server mariadb-client
