"""Environment variables a job may never set: the ones that steer a process as it starts.

A rank's interpreter and torchrun's run with `python -I` (`worker.launch`), which ignores every
``PYTHON*`` variable and the user's site directory, so no value in a job's `env` can make
Python import, run or load anything at start-up. What `-I` cannot cover is below the
interpreter: the dynamic loader, the C library and the tools a program may start. Those names
are refused here, whatever the `LAUNCHBAY_FORBIDDEN_ENV` setting says: a policy can add names,
never remove these.

The list is glibc's own (``UNSECURE_ENVVARS`` in ``sysdeps/generic/unsecvars.h``: what the C
library scrubs before it runs a set-user-ID program), ld.so(8)'s ``LD_*`` and the macOS
loader's ``DYLD_*``, glibc's tunables and ``MALLOC_*``, OpenSSL's configuration (it can load
an engine, i.e. a shared object), the libraries the GPU stack loads by name (NCCL's plugins,
``NCCL_*_PLUGIN``, and ``NCCL_CONF_FILE``, which can name them; CUDA's and NVTX's injection
libraries; OpenMP's tools), the shells' start-up hooks, ``BROWSER`` (Python's `webbrowser`
runs it), ``PATH`` and ``HOME`` (the worker sets them for the job's user), and every
``PYTHON*`` name as well, so that a spec never says something `-I` then silently ignores.
"""

from collections.abc import Iterable

STARTUP_PREFIXES = ("PYTHON", "LD_", "DYLD_", "MALLOC_", "GLIBC_", "OPENSSL_", "RESOLV_")
STARTUP_SUFFIXES = ("_PRELOAD",)
STARTUP_NAMES = frozenset(
    {
        # glibc's UNSECURE_ENVVARS not matched by a prefix above
        "GCONV_PATH",
        "GETCONF_DIR",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "NIS_PATH",
        "NLSPATH",
        "RES_OPTIONS",
        "TMPDIR",
        "TZDIR",
        # what a shell runs or reads at start-up (a program may start one)
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "IFS",
        "CDPATH",
        "GLOBIGNORE",
        # programs other code starts by name
        "BROWSER",
        "PATH",
        "HOME",
        "SHELL",
        # libraries the GPU stack loads (NCCL's plugins match NCCL_*_PLUGIN below)
        "NCCL_CONF_FILE",
        "CUDA_INJECTION64_PATH",
        "NVTX_INJECTION64_PATH",
        "NVTX_INJECTION32_PATH",
        "OMP_TOOL_LIBRARIES",
    }
)
# NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN, NCCL_PROFILER_PLUGIN, NCCL_ENV_PLUGIN...: each a library.
PLUGIN_PREFIX, PLUGIN_SUFFIX = "NCCL_", "_PLUGIN"


def is_startup_env(name: str) -> bool:
    """Whether `name` steers a process as it starts (compared without regard to case)."""
    upper = name.upper()
    return (
        upper in STARTUP_NAMES
        or upper.startswith(STARTUP_PREFIXES)
        or upper.endswith(STARTUP_SUFFIXES)
        or (upper.startswith(PLUGIN_PREFIX) and upper.endswith(PLUGIN_SUFFIX))
    )


def startup_env_names(names: Iterable[str]) -> list[str]:
    """The names among `names` that a job may not set, sorted."""
    return sorted(n for n in names if is_startup_env(n))
