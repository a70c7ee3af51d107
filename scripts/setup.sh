#!/usr/bin/env bash
# Creates .venv and installs Launchbay with pinned dependencies. Safe to re-run.
# torch is installed first and exactly (a CPU build here); an unpinned torch would pull a
# multi-GB CUDA build. Set LAUNCHBAY_TORCH to install another build (e.g. the Dockerfile's).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
TORCH=${LAUNCHBAY_TORCH:-torch==2.13.0}

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }

stamp=.venv/.launchbay-installed
want="$(cat requirements.lock requirements-dev.lock pyproject.toml | sha256sum | cut -c1-16) $TORCH"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setup: installing $TORCH and the pinned dependencies into .venv" >&2
pip install "$TORCH"
pip install -r requirements.lock -r requirements-dev.lock
pip install --no-deps -e .
echo "$want" > "$stamp"
