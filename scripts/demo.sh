#!/usr/bin/env bash
# Sets up Launchbay on the embedded defaults (SQLite and a Redis of its own), starts the API
# and a worker, submits the demo job, follows it to the end and downloads its checkpoint.
#
#   scripts/demo.sh           everything it started is stopped when it ends
#   scripts/demo.sh --keep    the stack stays up: it prints the dashboard's URL and the token
#                             to paste, and stops everything on Ctrl-C
#
# Redis: the demo starts a private redis-server on a free port, so its jobs never land on the
# queue of a Redis that something else uses. Set LAUNCHBAY_REDIS_URL to use a Redis of yours
# instead (it says so, since it then shares that Redis's `default` queue).
#
# Data: ./.launchbay, or LAUNCHBAY_DATA_DIR. As root, the worker runs the job as a user of its
# own (launchbay-job-N), which must reach the data dir: in a clone it cannot reach (under a
# 0700 home) the data goes to LAUNCHBAY_DEMO_DATA_DIR (default /var/lib/launchbay/demo).
# Not as root, the job runs as you: the demo says what that gives up.
set -euo pipefail
cd "$(dirname "$0")/.."

keep=""
for arg in "$@"; do
  case $arg in
    --keep) keep=yes ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument $arg (try --help)" >&2; exit 2 ;;
  esac
done

scripts/setup.sh
py=.venv/bin/python
lb=.venv/bin/launchbay

root=""
[ "$(id -u)" = 0 ] && root=yes
# The topmost directory above $1 that other users may not search (as worker/reach.py finds it).
unsearchable() {
  local dir=$1 found=""
  while [ "$dir" != / ]; do
    dir=$(dirname "$dir")
    [ $((0$(stat -c %a "$dir") & 1)) = 1 ] || found=$dir
  done
  echo "$found"
}
if [ -z "${LAUNCHBAY_DATA_DIR:-}" ]; then
  LAUNCHBAY_DATA_DIR=$PWD/.launchbay
  blocked=$([ -z "$root" ] || unsearchable "$LAUNCHBAY_DATA_DIR")
  if [ -n "$blocked" ]; then
    LAUNCHBAY_DATA_DIR=${LAUNCHBAY_DEMO_DATA_DIR:-/var/lib/launchbay/demo}
    echo "demo: the data goes to $LAUNCHBAY_DATA_DIR, not into this clone: the job's user could not"
    echo "demo:   reach it there ($blocked is not searchable by other users, mode 0$(stat -c %a "$blocked"))"
  fi
fi
export LAUNCHBAY_DATA_DIR
if [ -z "$root" ]; then
  echo "demo: not root, so the job runs as you ($(id -un)), not as a user of its own: it could read"
  echo "demo:   your files, the demo's database and other jobs' files (docs/security.md, 'Job users')"
fi
port=${LAUNCHBAY_DEMO_PORT:-8000}
export LAUNCHBAY_API_URL=http://127.0.0.1:$port
# The API always wants a bearer token: the demo makes itself an admin token unless one is set,
# and the CLI below uses it.
if [ -z "${LAUNCHBAY_ADMIN_TOKEN:-}" ]; then
  LAUNCHBAY_ADMIN_TOKEN=lb_$("$py" -c "import secrets; print(secrets.token_urlsafe(32))")
fi
export LAUNCHBAY_ADMIN_TOKEN
export LAUNCHBAY_TOKEN=${LAUNCHBAY_TOKEN:-$LAUNCHBAY_ADMIN_TOKEN}
logs=$LAUNCHBAY_DATA_DIR/demo
mkdir -p "$logs"
started_redis=""
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  if [ -n "$started_redis" ]; then
    "$py" -c "import redis,sys; redis.Redis.from_url(sys.argv[1]).shutdown(nosave=True)" \
      "$LAUNCHBAY_REDIS_URL" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'echo; echo "demo: stopping"; exit 0' INT TERM

redis_answers() {
  "$py" -c "import redis,sys; redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()" \
    "$LAUNCHBAY_REDIS_URL" 2>/dev/null
}
if [ -n "${LAUNCHBAY_REDIS_URL:-}" ]; then
  echo "demo: using the Redis at $LAUNCHBAY_REDIS_URL (LAUNCHBAY_REDIS_URL); its queue 'default'"
  echo "demo:   is shared with anything else using it: other workers there may take the demo job"
  redis_answers || { echo "demo: no Redis answers at $LAUNCHBAY_REDIS_URL" >&2; exit 1; }
else
  if ! command -v redis-server >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "demo: installing Debian's redis-server"
      apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
    else
      echo "demo: redis-server is not installed (apt-get install redis-server), or set" >&2
      echo "demo:   LAUNCHBAY_REDIS_URL to a Redis the demo may share" >&2
      exit 1
    fi
  fi
  redis_port=$("$py" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  export LAUNCHBAY_REDIS_URL=redis://127.0.0.1:$redis_port/0
  echo "demo: starting a private redis-server on port $redis_port (nothing else uses it)"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --logfile "$logs/redis.log" --dir "$logs"
  started_redis=yes
  for _ in $(seq 50); do redis_answers && break; sleep 0.2; done
fi

echo "demo: starting the API on $LAUNCHBAY_API_URL and a worker (logs in $logs)"
"$lb" api --port "$port" >"$logs/api.log" 2>&1 &
pids+=($!)
# A worker needs no API token (docs/security.md). It checks at start what its jobs will need,
# and refuses to start, saying why, rather than fail them: it is waited for below.
env -u LAUNCHBAY_ADMIN_TOKEN -u LAUNCHBAY_TOKEN "$lb" worker >"$logs/worker.log" 2>&1 &
pids+=($!)
# The API listens once its migrations are applied.
for _ in $(seq 300); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$logs/api.log" >&2; exit 1; }
  sleep 0.1
done

job=$("$lb" submit examples/digits.yaml --json | "$py" -c "import json,sys; print(json.load(sys.stdin)['id'])")
echo "demo: submitted job $job"
for _ in $(seq 600); do
  grep -q "INFO worker .* owns " "$logs/worker.log" && break
  if ! kill -0 "${pids[1]}" 2>/dev/null; then
    echo "demo: the worker did not start:" >&2
    grep -E "^error" "$logs/worker.log" >&2 || tail -n 20 "$logs/worker.log" >&2
    exit 1
  fi
  sleep 0.2
done
"$lb" watch "$job"
# A second run keeps the first run's checkpoint: this one goes to digits-best-2.pt, and so on.
saved=$("$lb" download "$job" --checkpoint best -o digits-best.pt --no-clobber)
echo "$saved"
best=${saved#saved }
best=${best% (sha256 verified)}
echo "demo: the best checkpoint is ./$best; to load it: docs/sdk.md#using-a-downloaded-checkpoint"

left_behind() {
  [ -n "$root" ] || return 0
  local prefix=${LAUNCHBAY_JOB_USER_PREFIX:-launchbay-job-} users
  users=$(getent passwd | cut -d: -f1 | grep -E "^${prefix}[0-9]+$" | paste -sd, - | sed 's/,/, /g')
  [ -n "$users" ] || return 0
  echo "demo: as root, the worker ran the job as a system user it made; these stay for the next"
  echo "demo:   run: $users, and ${LAUNCHBAY_JOB_USER_LEASE_DIR:-/run/launchbay/job-users}"
  echo "demo:   remove them with: .venv/bin/launchbay worker --remove-job-users"
  if [ "$LAUNCHBAY_DATA_DIR" != "$PWD/.launchbay" ]; then
    echo "demo:   the demo's data stays in $LAUNCHBAY_DATA_DIR (rm -rf it when done)"
  fi
}
if [ -z "$keep" ]; then
  echo "demo: done; everything it started is stopped now (scripts/demo.sh --keep leaves it running)"
  left_behind
  exit 0
fi
cat <<EOF

demo: the stack keeps running until Ctrl-C.
  dashboard  $LAUNCHBAY_API_URL/   (paste the token below to sign in)
  token      $LAUNCHBAY_ADMIN_TOKEN
  CLI        export LAUNCHBAY_API_URL=$LAUNCHBAY_API_URL LAUNCHBAY_TOKEN=$LAUNCHBAY_ADMIN_TOKEN
             .venv/bin/launchbay logs $job
EOF
left_behind
wait "${pids[@]}"
