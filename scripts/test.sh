#!/usr/bin/env bash
# Sets up Launchbay and runs the whole test suite. Redis and PostgreSQL: the tests start
# private servers when the machine's own do not answer, and stop what they started.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
