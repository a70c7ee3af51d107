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
# pip stays quiet (-q); a line every 15 s says the install goes on, so a first run (a minute
# or two, mostly torch) is never silent.
step() {
  local what=$1 started=$SECONDS ticker
  shift
  echo "setup: $what" >&2
  ( while sleep 15; do echo "setup:   ... still at it ($((SECONDS - started)) s)" >&2; done ) &
  ticker=$!
  if "$@"; then kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true; else
    local status=$?; kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true; return "$status"
  fi
  echo "setup:   done in $((SECONDS - started)) s" >&2
}
echo "setup: installing $TORCH and the pinned dependencies into .venv" >&2
step "1/3 $TORCH (the largest part)" pip install "$TORCH"
step "2/3 the pinned dependencies (requirements.lock)" pip install -r requirements.lock -r requirements-dev.lock
step "3/3 launchbay itself" pip install --no-deps -e .
echo "$want" > "$stamp"
