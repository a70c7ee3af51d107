#!/usr/bin/env bash
# Creates .venv with what running Launchbay needs, pinned: torch exactly (a CPU build here; an
# unpinned torch would pull a multi-GB CUDA build; LAUNCHBAY_TORCH names another, e.g. the
# Dockerfile's), then requirements.lock. Safe to re-run: a .venv that has it returns at once.
#
#   scripts/setup.sh          what the service, the worker and the jobs need (the demo's)
#   scripts/setup.sh --dev    also the development lock: tests, linters, type checker
#
# PYTHON picks the interpreter (default python3.11). uv installs, from its cache (hard-linked
# into .venv, so a second venv costs little disk), bytecode compiled as pip would; it reads
# PIP_INDEX_URL, PIP_EXTRA_INDEX_URL and PIP_FIND_LINKS (not pip.conf): where it fails, pip,
# which reads its own configuration, installs instead.
set -euo pipefail
cd "$(dirname "$0")/.."

dev=""
for arg in "$@"; do
  case $arg in
    --dev) dev=yes ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown argument $arg (try --help)" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3.11}
TORCH=${LAUNCHBAY_TORCH:-torch==2.13.0}
locks=(-r requirements.lock)
kind=run named=requirements.lock
if [ -n "$dev" ]; then
  locks+=(-r requirements-dev.lock)
  kind=dev named="requirements.lock and requirements-dev.lock"
fi

# What .venv holds: "<locks' hash> <torch> run|dev" (dev includes run; a stamp of older
# scripts, without the kind, had both locks).
stamp=.venv/.launchbay-installed
hash="$(cat requirements.lock requirements-dev.lock pyproject.toml | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
  read -r had_hash had_torch had_kind <"$stamp" || true
  if [ "$had_hash $had_torch" = "$hash $TORCH" ] && { [ "${had_kind:-dev}" = dev ] || [ "$kind" = run ]; }; then
    exit 0
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi

# A line every 15 s says the install goes on, so a first run is never silent.
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
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
uv_pin="$(grep -m1 -E '^uv==' requirements.lock)"
get_uv() {
  [ "$(.venv/bin/uv --version 2>/dev/null | cut -d' ' -f2)" = "${uv_pin#uv==}" ] || pip install "$uv_pin"
}
uv_install() {
  local -a env=()
  [ -n "${PIP_INDEX_URL:-}" ] && env+=("UV_DEFAULT_INDEX=$PIP_INDEX_URL")
  [ -n "${PIP_EXTRA_INDEX_URL:-}" ] && env+=("UV_INDEX=$PIP_EXTRA_INDEX_URL")
  [ -n "${PIP_FIND_LINKS:-}" ] && env+=("UV_FIND_LINKS=${PIP_FIND_LINKS// /,}")
  env "${env[@]}" .venv/bin/uv pip install --quiet --python .venv/bin/python \
    --compile-bytecode "$@"
}
install() {
  uv_install "$@" && return 0
  echo "setup:   uv failed (above); pip tries instead, with pip's own configuration" >&2
  pip install "$@"
}

echo "setup: installing $TORCH and the pinned dependencies ($kind) into .venv" >&2
step "1/3 uv (${uv_pin#uv==}), the installer" get_uv
step "2/3 $TORCH and $named" install "$TORCH" "${locks[@]}"
step "3/3 launchbay itself" install --no-deps -e .
echo "$hash $TORCH $kind" >"$stamp"
