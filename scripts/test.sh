#!/usr/bin/env bash
# Sets up Launchbay (and, as root, Chromium for the browser tests), then runs the whole test
# suite. Redis and PostgreSQL: the tests start private servers when the machine's own do not
# answer, and stop what they started.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
# The browser tests drive Debian's Chromium, the Slurm tests Debian's Slurm, the pooled
# deployment's test Debian's PgBouncer; as root, install them when missing.
if [ "$(id -u)" = 0 ]; then
  scripts/install-browser.sh
  scripts/install-slurm.sh
  scripts/install-pgbouncer.sh
fi
# Two test processes (pytest-xdist), each test file kept whole in one of them (its module
# fixtures are started once): most of a test's time is spent waiting on processes it started
# (three took as long on this 2-core machine, and the ranks of timed jobs started too late). The 15 slowest tests are listed at the end of each part.
# LAUNCHBAY_TEST_WORKERS=0 runs everything in this process. Then, one at a time, the tests
# marked `alone`: they change what the host shares (network namespaces on a bridge, Slurm's
# daemons) and must not meet one another. Exit status 5 (no test selected) of either part is
# fine when the other ran tests.
status=0
.venv/bin/python -m pytest -n "${LAUNCHBAY_TEST_WORKERS:-2}" --dist loadfile -m "not alone" \
  --durations=15 "$@" \
  || status=$?
alone=0
.venv/bin/python -m pytest -m alone --durations=15 "$@" || alone=$?
if [ "$status" = 5 ] && [ "$alone" != 5 ]; then status=0; fi
if [ "$alone" != 0 ] && [ "$alone" != 5 ]; then status=$alone; fi
exit "$status"
