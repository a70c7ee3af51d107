# One image for the api and the workers (the worker needs CUDA torch; the api is
# lighter without it, but one image keeps their code and migrations in lockstep).
#
# Base: python:3.11-slim rather than nvidia/cuda. PyTorch's CUDA wheels bundle the
# CUDA runtime, cuDNN and NCCL (as nvidia-* wheels), so a CUDA base image would only
# add a second, unused copy of those libraries and a non-default Python; the host's
# driver is mounted in by the NVIDIA Container Toolkit at run time.
#
# Build for another CUDA line or for CPU only:
#   docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 .
#   docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu .

# --- stage 1: build the launchbay wheel, so no source tree lands in the image ---
FROM python:3.11.14-slim-bookworm AS wheel

WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- stage 2: the runtime image ---
FROM python:3.11.14-slim-bookworm

# cu128 wheels want a driver for CUDA 12.8 (R570 or newer); docs/deployment.md says
# what to build for older drivers and GPUs.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    LAUNCHBAY_DATA_DIR=/data \
    TORCH_EXTENSIONS_DIR=/cache/torch_extensions \
    UV_CACHE_DIR=/cache/uv

# A C++ compiler and ninja: DeepSpeed (and any torch.utils.cpp_extension user) compiles its
# ops on first use (about 2 minutes), then loads them from TORCH_EXTENSIONS_DIR, a volume in
# docker-compose.yml so the compile happens once per worker, not once per job. Debian's own
# versions of the release this image is built on: pinning them would break the build at the
# next security update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ ninja-build \
    && rm -rf /var/lib/apt/lists/*

# A fixed uid/gid so volumes and bind mounts can be chowned from the host.
RUN groupadd --system --gid 10001 launchbay \
    && useradd --system --uid 10001 --gid launchbay --create-home \
        --home-dir /home/launchbay --shell /usr/sbin/nologin launchbay \
    && install -d -o launchbay -g launchbay -m 0711 /data \
    && install -d -o launchbay -g launchbay -m 0755 /cache /cache/torch_extensions /cache/uv \
    && for i in $(seq 0 63); do \
        useradd --system --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin "launchbay-job-$i"; \
    done

# torch first, from its own index and in its own layer: it is most of the image and
# changes least often. The lock excludes torch, so the next step keeps this build.
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

# The lock includes py-spy, which a worker runs to read its ranks' stacks (it needs
# CAP_SYS_PTRACE: docker-compose.yml, docs/reliability.md).
COPY requirements.lock /tmp/requirements.lock
RUN pip install --no-cache-dir -r /tmp/requirements.lock

# The last line fails the build if a dependency swapped in another torch build: the
# local version must name the wheel index (2.13.0+cu128, 2.13.0+cpu).
COPY --from=wheel /wheels/ /tmp/wheels/
RUN pip install --no-cache-dir --no-deps /tmp/wheels/launchbay-*.whl \
    && python -c "import sys, torch; want = '${TORCH_VERSION}+${TORCH_INDEX_URL##*/}'; sys.exit(None if torch.__version__ == want else f'torch {torch.__version__}, expected {want}')"

USER 10001:10001
WORKDIR /home/launchbay

EXPOSE 8000

# The api's liveness (a worker serves no port: compose disables this for it). No proxy
# handler, so an HTTP(S)_PROXY in the environment cannot reroute the loopback request.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.build_opener(u.ProxyHandler({})).open('http://127.0.0.1:8000/v1/health', timeout=4)"]

CMD ["launchbay", "api", "--host", "0.0.0.0", "--port", "8000"]
