#!/usr/bin/env bash
# Proves the CUDA and NCCL path on a GPU host in one command (at most 8 minutes): a private stack
# (SQLite, its own Redis, the API, one worker given every GPU) runs the checks, and
# gpu-check/report.json and gpu-check/report.md get one row per check (docs/gpu-check.md).
#
#   scripts/gpu-check.sh --prepare [--python-version 3.12]
#                             where PyPI and Debian are reachable: gpu-check-kit/, the wheels
#                             and the redis-server a host without a registry needs (copy it along)
#   scripts/gpu-check.sh      on the GPU host: every check
#   scripts/gpu-check.sh --cpu [--quick]
#                             the same harness with gloo on 2 CPU ranks (CUDA rows: not_run);
#                             --quick: fewer, shorter jobs (CI)
#   --out DIR                 write the report there instead of gpu-check/
#
# The host's Python (LAUNCHBAY_GPU_CHECK_PYTHON, else /opt/torch/.venv/bin/python3 when there)
# brings torch; the kit brings the rest, installed into a private environment under /tmp that
# is removed at the end. Without such a Python, the project's .venv (scripts/setup.sh) is used.
set -euo pipefail
cd "$(dirname "$0")/.."

kit=${LAUNCHBAY_GPU_CHECK_KIT:-$PWD/gpu-check-kit}
prepare="" python_version=3.12 flags=() out=gpu-check
while [ $# -gt 0 ]; do
  case $1 in
    --prepare) prepare=yes ;;
    --python-version) python_version=${2:?--python-version needs a value}; shift ;;
    --cpu | --quick) flags+=("$1") ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ -n "$prepare" ]; then
  scripts/setup.sh
  exec .venv/bin/python -m bench.gpu_check.kit prepare --kit "$kit" --python-version "$python_version"
fi

host_python=${LAUNCHBAY_GPU_CHECK_PYTHON:-}
if [ -z "$host_python" ] && [ -x /opt/torch/.venv/bin/python3 ]; then
  host_python=/opt/torch/.venv/bin/python3
fi

work=$(mktemp -d /tmp/launchbay-gpu-check.XXXXXX)
chmod 711 "$work"  # job users pass through it to the environment's interpreter
trap 'rm -rf "$work"' EXIT

if [ -n "$host_python" ]; then
  if [ ! -d "$kit/wheels" ]; then
    echo "gpu-check: no kit at $kit: run scripts/gpu-check.sh --prepare where PyPI is" >&2
    echo "gpu-check:   reachable, and copy gpu-check-kit/ here with the repository" >&2
    exit 1
  fi
  echo "gpu-check: installing the kit for $host_python into $work/venv" >&2
  "$host_python" -m bench.gpu_check.kit install --kit "$kit" --interpreter "$host_python" \
    --venv "$work/venv"
  python=$work/venv/bin/python
  # Debian's redis-server from the kit, with the libraries it links against (for it alone).
  mkdir "$work/bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$kit/redis/lib" \
    "$kit/redis/bin/redis-server" > "$work/bin/redis-server"
  chmod 755 "$work/bin/redis-server"
  export PATH=$work/bin:$PATH
else
  scripts/setup.sh
  python=.venv/bin/python
fi

PYTHONUNBUFFERED=1 "$python" -m bench.gpu_check "${flags[@]}" --out "$out"
