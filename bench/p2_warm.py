"""P2★: submit → first rank-0 step on a warm worker ÷ bare torchrun's start → first step, the same
program (the synthetic recipe, 2 ranks, 1 epoch), in rounds whose order rotates (bare, warm,
cold; then warm, cold, bare; ...). Each round runs it three ways: under plain torchrun, through
Launchbay with no launcher named (warm: its ranks forked from the worker's fork server,
`launch_path: warm`), and through Launchbay with `launcher: torchrun` (cold, row P2-cold). Each
ratio is taken within its round, so a drift of the machine's speed between rounds cancels; the
result is the median of the rounds. The worker's fork server is started as the worker starts and
warmed by one job before the rounds (a worker that has served its environment recently).

`python -m bench warm` takes about 2 minutes here.
"""

from pathlib import Path
from tempfile import mkdtemp
from typing import Any

import httpx

from bench.common import (
    Result,
    bare_torchrun,
    first_step_ts,
    job_events,
    median,
    recipe_spec,
    running_stack,
    submit_and_wait,
)
from bench.p1_p2_training import rotated, spread
from devstack.stack import Stack

ROUNDS = 7
CONFIG: dict[str, Any] = {"epochs": 1, "log_every_steps": 1}
MODULE = "jobs.recipes.synthetic"
GOAL = 0.5


def through_launchbay(
    http: httpx.Client, stack: Stack, name: str, launcher: str | None
) -> tuple[float, str]:
    """(submit → first step in seconds, the job's launch_path)."""
    spec = recipe_spec(name, "synthetic", CONFIG, 2)
    if launcher is not None:
        spec["launcher"] = launcher
    start, job = submit_and_wait(http, stack, spec, poll_s=0.1)
    return first_step_ts(job_events(stack, job["id"])) - start, str(job["launch_path"])


def run() -> list[Result]:
    scratch = Path(mkdtemp(prefix="launchbay-bench-warm-"))
    times: dict[str, list[float]] = {"bare": [], "warm": [], "cold": []}
    with running_stack() as stack, stack.client() as http:
        through_launchbay(http, stack, "warm-up", None)  # the fork server is ready after it
        for i in range(ROUNDS):
            for way in rotated(list(times), i):
                if way == "bare":
                    start, events = bare_torchrun(MODULE, CONFIG, scratch / f"bare-{i}", 2)
                    times["bare"].append(first_step_ts(events) - start)
                    continue
                launcher = None if way == "warm" else "torchrun"
                seconds, path = through_launchbay(http, stack, f"{way}-{i}", launcher)
                if path != way:
                    raise RuntimeError(f"a {way} run started {path}")
                times[way].append(seconds)
    return [row("P2★", "warm", times, "≤ 0.5", GOAL), row("P2-cold", "cold", times, "report", None)]


def row(
    rid: str, way: str, times: dict[str, list[float]], goal: str, limit: float | None
) -> Result:
    ratios = [w / b for w, b in zip(times[way], times["bare"], strict=True)]
    ratio = median(ratios)
    launcher = "no launcher named" if way == "warm" else "launcher: torchrun"
    return Result(
        rid,
        f"submit → first rank-0 step through Launchbay, {way} ({launcher}) ÷ bare torchrun's "
        "start → first step",
        f"{ratio:.3f} (medians {median(times[way]):.2f} s vs {median(times['bare']):.2f} s; "
        f"{len(ratios)} rounds, ratios {spread(ratios)})",
        goal,
        None if limit is None else ratio <= limit,
        "synthetic recipe, 2 ranks, 1 epoch; order rotated each round; one warm-up job first",
    )
