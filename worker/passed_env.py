"""What of the worker's own environment reaches a job's ranks: an allow-list.

A worker's environment holds what its operator put there for the worker itself (a package
index URL with its password, tokens of other services, anything a shell profile exports); a
rank is the code of whoever submitted the job. So a rank gets only the variables named here,
and the spec's `env` and Launchbay's own on top (`worker.launch.build_env`):

- the process's basics: `PATH`, `HOME`, `TMPDIR`, `USER`, `LOGNAME` (a job user's run has its
  own `HOME`, `TMPDIR`, `USER`, `LOGNAME`), the locale (`LANG`, `LANGUAGE`, `LC_*`) and `TZ`;
- what decides how fast a rank computes, allocates and communicates, as a rank of bare
  ``torchrun`` on the host would see it: thread pools (`OMP_*`, `MKL_*`, `KMP_*`, `GOMP_*`,
  `OPENBLAS_*`, `DNNL_*`, `ONEDNN_*`), the loader and allocator (`LD_*`, `MALLOC_*`: an
  operator's `LD_LIBRARY_PATH` to the CUDA libraries, or a preloaded allocator), PyTorch
  (`TORCH*`, `ATEN_*`, `PYTHON*`, which ``python -I`` ignores anyway), CUDA (`CUDA_*`) and
  the collectives and their transports (`NCCL_*`, `GLOO_*`, `TP_*`, `UCX_*`, `FI_*`);
- the network: proxies (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`, `ALL_PROXY`, in either
  case) and certificate bundles (`SSL_CERT_FILE`, `SSL_CERT_DIR`, `REQUESTS_CA_BUNDLE`,
  `CURL_CA_BUNDLE`). A value that holds a URL with a password (``http://user:pw@proxy``) is
  held back: it is a credential.

`LAUNCHBAY_JOB_PASS_ENV` names more (names, or prefixes ending in ``*``), passed as they are.
Whatever it says, the service's own credentials (`NEVER_PASSED`) never reach a rank, nor
those each executor's backend and each artifact store says are theirs (`backend_secret_env`:
the RQ executor's Redis, the S3 store's `AWS_*`), nor what a launcher sets for each rank.
"""

import re
from collections.abc import Iterable, Mapping, Sequence

from jobs.spec import LAUNCHER_ENV
from service.artifacts import SECRET_ENV as STORE_SECRET_ENV
from service.executors.registry import secret_env as executor_secret_env

PASSED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "TMPDIR",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        *(f"{name}_proxy" for name in ("http", "https", "no", "all")),
        *(f"{name}_PROXY" for name in ("HTTP", "HTTPS", "NO", "ALL")),
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
    }
)
PASSED_PREFIXES = (
    "LC_",
    "OMP_",
    "MKL_",
    "KMP_",
    "GOMP_",
    "OPENBLAS_",
    "DNNL_",
    "ONEDNN_",
    "LD_",
    "MALLOC_",
    "TORCH",
    "ATEN_",
    "PYTHON",
    "CUDA_",
    "NCCL_",
    "GLOO_",
    "TP_",
    "UCX_",
    "FI_",
)
# Never handed to user code, whatever the operator names: credentials of the service itself.
NEVER_PASSED = frozenset(
    {
        "LAUNCHBAY_ADMIN_TOKEN",
        "LAUNCHBAY_TOKEN",
        "LAUNCHBAY_DATABASE_URL",
        "LAUNCHBAY_PIP_INDEX_URL",
        "LAUNCHBAY_PIP_FIND_LINKS",
        "DATABASE_URL",
    }
)
# Nor the settings of the service's own PostgreSQL clients (passwords included), nor a
# launcher's variables of an earlier run (they would only mislead this one).
NEVER_PASSED_PREFIXES = ("PG", "POSTGRES_", "TORCHELASTIC_")
# `scheme://user:password@` (or `user:password@` with no scheme) at the start of a value.
URL_PASSWORD = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.\-]*://)?[^/@\s:]*:[^/@\s]*@")


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether `name` is one of `patterns`: a name, or a prefix ending in ``*``."""
    for pattern in patterns:
        if pattern.endswith("*"):
            if name.startswith(pattern[:-1]):
                return True
        elif name == pattern:
            return True
    return False


def backend_secret_env() -> frozenset[str]:
    """The credentials' variables (names, or prefixes ending in ``*``) that the executors'
    backends and the artifact stores keep from the ranks, in use or not."""
    return executor_secret_env() | STORE_SECRET_ENV


def never_passed(name: str, secrets: Iterable[str]) -> bool:
    """Whether `name` is a credential (`secrets`: `backend_secret_env()`) or a launcher's."""
    return (
        name in NEVER_PASSED
        or name in LAUNCHER_ENV
        or name.startswith(NEVER_PASSED_PREFIXES)
        or matches(name, secrets)
    )


def holds_password(value: str) -> bool:
    return URL_PASSWORD.match(value) is not None


def passed_env(base_env: Mapping[str, str], extra: Sequence[str] = ()) -> dict[str, str]:
    """What a rank gets of `base_env` (the worker's environment): the allow-list above, and
    the names or prefixes of `extra` (`LAUNCHBAY_JOB_PASS_ENV`)."""
    passed = {}
    secrets = backend_secret_env()
    for name, value in base_env.items():
        if never_passed(name, secrets):
            continue
        if matches(name, extra) or (built_in(name) and not holds_password(value)):
            passed[name] = value
    return passed


def held_back(base_env: Mapping[str, str], extra: Sequence[str] = ()) -> list[str]:
    """The allow-listed names of `base_env` whose value is held back for its password."""
    secrets = backend_secret_env()
    return sorted(
        name
        for name, value in base_env.items()
        if built_in(name)
        and holds_password(value)
        and not never_passed(name, secrets)
        and not matches(name, extra)
    )


def built_in(name: str) -> bool:
    return name in PASSED_NAMES or name.startswith(PASSED_PREFIXES)
