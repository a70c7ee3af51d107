"""P8: a job's own Python environment (worker/environment.py).

1. Set-up on a warm cache ÷ on a cold one: the same requirements (two small packages from the
   package index) prepared by `EnvironmentCache` with an empty environment cache and an empty
   uv cache (cold: resolve, download, venv, install), then again (warm: the cached
   environment). A rebuild with only uv's download cache warm is reported beside it.
2. Time to first step with a cached environment ÷ with none: the `synthetic` recipe on 2 ranks
   through a real worker, from submission to rank 0's first metric line; the environment is
   built by a warm-up job first; runs alternate, medians compared.
"""

import os
import tempfile
from pathlib import Path

from bench.common import (
    Result,
    first_step_ts,
    job_events,
    median,
    recipe_spec,
    running_stack,
    submit_and_wait,
)

REQUIREMENTS = ["tomli-w==1.2.0", "humanize==4.12.3"]
STARTUP_CONFIG = {"epochs": 1, "log_every_steps": 1}
ROUNDS = 3


def setup_times() -> tuple[float, float, float]:
    """(cold, warm, rebuilt with uv's cache warm) seconds."""
    from worker.environment import EnvironmentCache, Sources

    root = Path(tempfile.mkdtemp(prefix="launchbay-bench-envs-"))
    saved = os.environ.get("UV_CACHE_DIR")
    os.environ["UV_CACHE_DIR"] = str(root / "uv-cache")
    try:
        cache = EnvironmentCache(root / "envs", 1 << 40, Sources())
        cold = cache.prepare(REQUIREMENTS, lambda line: None).seconds
        warm = cache.prepare(REQUIREMENTS, lambda line: None).seconds
        other = EnvironmentCache(root / "envs-2", 1 << 40, Sources())
        rebuilt = other.prepare(REQUIREMENTS, lambda line: None).seconds
    finally:
        if saved is None:
            os.environ.pop("UV_CACHE_DIR", None)
        else:
            os.environ["UV_CACHE_DIR"] = saved
    return cold, warm, rebuilt


def first_steps() -> tuple[float, float]:
    """Median seconds from submission to the first step: (with a cached environment, none)."""
    with_env: list[float] = []
    without: list[float] = []
    with running_stack() as stack, stack.client() as http:
        spec = recipe_spec("p8", "synthetic", STARTUP_CONFIG, 2)
        env_spec = {**spec, "environment": {"requirements": REQUIREMENTS}}
        submit_and_wait(http, stack, env_spec)  # builds the environment
        for _ in range(ROUNDS):
            for target, job_spec in ((with_env, env_spec), (without, spec)):
                start, job = submit_and_wait(http, stack, job_spec)
                target.append(first_step_ts(job_events(stack, job["id"])) - start)
    return median(with_env), median(without)


def run() -> list[Result]:
    cold, warm, rebuilt = setup_times()
    cached, bare = first_steps()
    return [
        Result(
            "P8a",
            "environment set-up: warm cache ÷ cold cache",
            f"{warm / cold:.3f} ({warm:.3f} s ÷ {cold:.2f} s)",
            "small",
            None,
            f"{len(REQUIREMENTS)} packages from PyPI; rebuilt, uv's cache warm: {rebuilt:.2f} s",
        ),
        Result(
            "P8b",
            "time to first step: cached environment ÷ no environment",
            f"{cached / bare:.2f} ({cached:.2f} s ÷ {bare:.2f} s)",
            "≤ 1.1",
            cached / bare <= 1.1,
            f"synthetic recipe, 2 ranks, medians of {ROUNDS}",
        ),
    ]
