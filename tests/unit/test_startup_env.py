"""No job `env` reaches what Python or the C library read as a process starts: every such name
is refused at submission, whatever the policy setting, and dropped at launch."""

from pathlib import Path

import pytest

from jobs.spec import JobSpec
from jobs.startup_env import is_startup_env
from service.auth import Principal
from service.errors import Unprocessable
from service.policy import apply_submission_policy
from service.settings import Settings
from worker.launch import RunPaths, build_launch

# `python --help-env` of CPython 3.11 to 3.13, and the debug build's own.
PYTHON_ENV = [
    "PYTHONBREAKPOINT", "PYTHONCASEOK", "PYTHONCOERCECLOCALE", "PYTHONDEBUG", "PYTHONDEVMODE",
    "PYTHONDONTWRITEBYTECODE", "PYTHONEXECUTABLE", "PYTHONFAULTHANDLER", "PYTHONHASHSEED",
    "PYTHONHOME", "PYTHONINSPECT", "PYTHONINTMAXSTRDIGITS", "PYTHONIOENCODING",
    "PYTHONLEGACYWINDOWSFSENCODING", "PYTHONLEGACYWINDOWSSTDIO", "PYTHONMALLOC",
    "PYTHONMALLOCSTATS", "PYTHONNODEBUGRANGES", "PYTHONNOUSERSITE", "PYTHONOPTIMIZE",
    "PYTHONPATH", "PYTHONPLATLIBDIR", "PYTHONPROFILEIMPORTTIME", "PYTHONPYCACHEPREFIX",
    "PYTHONSAFEPATH", "PYTHONSTARTUP", "PYTHONTRACEMALLOC", "PYTHONUNBUFFERED", "PYTHONUSERBASE",
    "PYTHONUTF8", "PYTHONVERBOSE", "PYTHONWARNDEFAULTENCODING", "PYTHONWARNINGS",
    "PYTHONASYNCIODEBUG", "PYTHONTHREADDEBUG", "PYTHONDUMPREFS", "PYTHONSHOWREFCOUNT",
    "PYTHON_BASIC_REPL", "PYTHON_COLORS", "PYTHON_CPU_COUNT", "PYTHON_FROZEN_MODULES",
    "PYTHON_GIL", "PYTHON_HISTORY", "PYTHON_PERF_JIT_SUPPORT", "PYTHON_PRESITE",
]  # fmt: skip
# ld.so(8).
LOADER_ENV = [
    "LD_ASSUME_KERNEL", "LD_AUDIT", "LD_BIND_NOT", "LD_BIND_NOW", "LD_DEBUG", "LD_DEBUG_OUTPUT",
    "LD_DYNAMIC_WEAK", "LD_HWCAP_MASK", "LD_LIBRARY_PATH", "LD_ORIGIN_PATH", "LD_POINTER_GUARD",
    "LD_PREFER_MAP_32BIT_EXEC", "LD_PRELOAD", "LD_PROFILE", "LD_PROFILE_OUTPUT", "LD_SHOW_AUXV",
    "LD_TRACE_LOADED_OBJECTS", "LD_TRACE_PRELINKING", "LD_USE_LOAD_BIAS", "LD_VERBOSE",
    "LD_WARN", "DYLD_INSERT_LIBRARIES", "DYLD_LIBRARY_PATH",
]  # fmt: skip
# glibc: UNSECURE_ENVVARS (sysdeps/generic/unsecvars.h), malloc's and the tunables.
LIBC_ENV = [
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
    "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR", "TZDIR",
    "MALLOC_CHECK_", "MALLOC_TOP_PAD_", "MALLOC_PERTURB_", "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST",
]  # fmt: skip
# What other programs a job's code may start read: shells, OpenSSL, webbrowser, exec by name.
OTHER_ENV = [
    "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "OPENSSL_CONF", "OPENSSL_ENGINES",
    "OPENSSL_MODULES", "BROWSER", "PATH", "HOME", "SHELL", "XYZ_PRELOAD",
]  # fmt: skip
# What the GPU stack loads as a library: NCCL's plugins (and its configuration file, which can
# name them), CUDA's and NVTX's injection libraries, OpenMP's tools.
GPU_ENV = [
    "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN",
    "NCCL_CONF_FILE", "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH",
    "OMP_TOOL_LIBRARIES",
]  # fmt: skip
STARTUP_ENV = PYTHON_ENV + LOADER_ENV + LIBC_ENV + OTHER_ENV + GPU_ENV
USER = Principal(name="alice", role="user")
ADMIN = Principal(name="root", role="admin")


def synthetic(env: dict[str, str]) -> JobSpec:
    return JobSpec(name="s", recipe="synthetic", env=env)


@pytest.mark.parametrize("name", STARTUP_ENV)
def test_every_startup_name_is_refused_whatever_the_policy(name: str) -> None:
    assert is_startup_env(name) and is_startup_env(name.lower())
    for forbidden in ([], ["FOO*"]):
        settings = Settings(forbidden_env=forbidden)
        for principal in (USER, ADMIN):
            with pytest.raises(Unprocessable) as refused:
                apply_submission_policy(synthetic({"OK": "1", name: "x"}), principal, settings)
            assert refused.value.code == "forbidden_env"
            assert [d["loc"][-1] for d in refused.value.detail] == [name]


@pytest.mark.parametrize("name", STARTUP_ENV)
def test_no_startup_name_reaches_a_rank(name: str) -> None:
    """A spec stored before the rule (or let through) still cannot set one at launch."""
    plan = build_launch(
        synthetic({name: "hostile", "OK": "1"}),
        job_id="j",
        attempt=1,
        paths=RunPaths.for_attempt(Path("/data"), "j", 1),
        resume_from=None,
        cuda_available=False,
        port=29500,
        python="/venv/bin/python",
        base_env={},
        recipe_module="jobs.recipes.synthetic",
    )
    assert plan.env.get(name) != "hostile"
    assert plan.env["OK"] == "1"


def test_ordinary_names_are_accepted() -> None:
    env = {"WANDB_API_KEY": "k", "HF_TOKEN": "t", "OMP_NUM_THREADS": "2", "MY_PATH_VAR": "x"}
    env |= {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_NET": "Socket"}
    accepted = apply_submission_policy(synthetic(env), USER, Settings())
    assert accepted.env == env
