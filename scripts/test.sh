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
# (three took as long on this 2-core machine, and the ranks of timed jobs started too late).
# LAUNCHBAY_TEST_WORKERS=0 runs them in one process. Beside them, in a third process, one at a
# time, the tests marked `alone`: they change what the host shares (network namespaces on a
# bridge, Slurm's daemons) and must not meet one another; they mostly wait on their daemons.
# Each part lists its 15 slowest tests; the alone part's output follows the other's. Exit
# status 5 (no test selected) of either part is fine when the other ran tests.
alone_log=$(mktemp)
trap 'rm -f "$alone_log"' EXIT
.venv/bin/python -m pytest -m alone --durations=15 "$@" >"$alone_log" 2>&1 &
alone_pid=$!
status=0
.venv/bin/python -m pytest -n "${LAUNCHBAY_TEST_WORKERS:-2}" --dist loadfile -m "not alone" \
  --durations=15 "$@" \
  || status=$?
alone=0
wait "$alone_pid" || alone=$?
echo "--- the tests marked alone ---"
cat "$alone_log"
if [ "$status" = 5 ] && [ "$alone" != 5 ]; then status=0; fi
if [ "$alone" != 0 ] && [ "$alone" != 5 ]; then status=$alone; fi
exit "$status"
