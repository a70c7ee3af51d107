#!/usr/bin/env bash
# Installs PgBouncer from Debian's packages for the test of a pooled deployment
# (tests/e2e/test_pgbouncer.py starts a private one; the package's own service is not used).
# Idempotent: does nothing when present. Needs root (CI runs it before the tests).
set -euo pipefail
cd "$(dirname "$0")"
./install-debian-packages.sh install-pgbouncer pgbouncer
