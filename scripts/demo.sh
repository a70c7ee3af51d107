#!/usr/bin/env bash
# Sets up Launchbay on the embedded defaults (SQLite and a local Redis), starts the API and a
# worker, submits the demo job, follows it to the end and downloads its checkpoint.
# Everything it started is stopped when it exits.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

export LAUNCHBAY_DATA_DIR=${LAUNCHBAY_DATA_DIR:-$PWD/.launchbay}
export LAUNCHBAY_REDIS_URL=${LAUNCHBAY_REDIS_URL:-redis://127.0.0.1:6379/0}
port=${LAUNCHBAY_DEMO_PORT:-8000}
export LAUNCHBAY_API_URL=http://127.0.0.1:$port
# The API always wants a bearer token: the demo makes itself an admin token unless one is set,
# and the CLI below uses it.
if [ -z "${LAUNCHBAY_ADMIN_TOKEN:-}" ]; then
  LAUNCHBAY_ADMIN_TOKEN=lb_$(.venv/bin/python -c "import secrets; print(secrets.token_urlsafe(32))")
  LAUNCHBAY_TOKEN=$LAUNCHBAY_ADMIN_TOKEN
fi
export LAUNCHBAY_ADMIN_TOKEN
export LAUNCHBAY_TOKEN=${LAUNCHBAY_TOKEN:-$LAUNCHBAY_ADMIN_TOKEN}
mkdir -p "$LAUNCHBAY_DATA_DIR"
logs=$LAUNCHBAY_DATA_DIR/demo
mkdir -p "$logs"
lb=.venv/bin/launchbay
started_redis=""
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  if [ -n "$started_redis" ]; then
    .venv/bin/python -c "import redis,sys; redis.Redis.from_url(sys.argv[1]).shutdown(nosave=True)" \
      "$LAUNCHBAY_REDIS_URL" 2>/dev/null || true
  fi
}
trap cleanup EXIT

redis_answers() {
  .venv/bin/python -c "import redis,sys; redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()" \
    "$LAUNCHBAY_REDIS_URL" 2>/dev/null
}
if ! redis_answers; then
  if ! command -v redis-server >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
    else
      echo "demo: no Redis answers at $LAUNCHBAY_REDIS_URL and redis-server is not installed" >&2
      exit 1
    fi
  fi
  redis_port=$(.venv/bin/python -c "import sys; from urllib.parse import urlparse; print(urlparse(sys.argv[1]).port or 6379)" "$LAUNCHBAY_REDIS_URL")
  echo "demo: starting redis-server on port $redis_port"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --logfile "$logs/redis.log" --dir "$logs"
  started_redis=yes
  for _ in $(seq 50); do redis_answers && break; sleep 0.2; done
fi

echo "demo: starting the API on $LAUNCHBAY_API_URL and a worker (logs in $logs)"
"$lb" api --port "$port" >"$logs/api.log" 2>&1 &
pids+=($!)
for _ in $(seq 150); do
  .venv/bin/python -c "import httpx,sys; httpx.get(sys.argv[1]).raise_for_status()" \
    "$LAUNCHBAY_API_URL/v1/health" 2>/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$logs/api.log" >&2; exit 1; }
  sleep 0.2
done
# A worker needs no API token (docs/security.md).
env -u LAUNCHBAY_ADMIN_TOKEN -u LAUNCHBAY_TOKEN "$lb" worker >"$logs/worker.log" 2>&1 &
pids+=($!)

job=$("$lb" submit examples/digits.yaml --json | .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)['id'])")
echo "demo: submitted job $job"
"$lb" watch "$job"
"$lb" download "$job" --checkpoint best -o digits-best.pt
echo "demo: done. The checkpoint is ./digits-best.pt; logs: $lb logs $job (while the API runs)"
