"""P1: training steps/s under Launchbay ÷ bare torchrun.
P2: submit → first rank-0 step under Launchbay, minus bare torchrun's start → first step.

The same recipe program runs both ways, alternately, in the same run of this script.
"""

import tempfile
from collections.abc import Mapping
from pathlib import Path

from bench.common import (
    Result,
    bare_torchrun,
    first_step_ts,
    job_events,
    median,
    running_stack,
    steps_per_second,
    submit_and_wait,
)

THROUGHPUT_CONFIG = {"epochs": 40, "log_every_steps": 10}
STARTUP_CONFIG = {"epochs": 1, "log_every_steps": 1}
NO_CHECKPOINTS = {"every_epochs": None, "every_steps": None}


def spec(name: str, recipe: str, config: Mapping[str, object], nproc: int = 2) -> dict[str, object]:
    return {
        "name": name,
        "recipe": recipe,
        "nproc_per_node": nproc,
        "config": config,
        "checkpoint": NO_CHECKPOINTS,
    }


def run(rounds: int = 3, startup_rounds: int = 5) -> list[Result]:
    scratch = Path(tempfile.mkdtemp(prefix="launchbay-bench-p1-"))
    bare_speed, lb_speed, bare_start, lb_start = [], [], [], []
    bare_one, lb_one = [], []
    with running_stack() as stack, stack.client() as http:
        for i in range(rounds):
            _, events = bare_torchrun("jobs.recipes.digits", THROUGHPUT_CONFIG, scratch / f"b{i}")
            bare_speed.append(steps_per_second(events))
            _, job = submit_and_wait(http, stack, spec("p1", "digits", THROUGHPUT_CONFIG))
            lb_speed.append(steps_per_second(job_events(stack, job["id"])))
            # The same with one rank, which leaves a core to the worker and the API.
            _, events = bare_torchrun(
                "jobs.recipes.digits", THROUGHPUT_CONFIG, scratch / f"o{i}", nproc=1
            )
            bare_one.append(steps_per_second(events))
            _, job = submit_and_wait(http, stack, spec("p1", "digits", THROUGHPUT_CONFIG, 1))
            lb_one.append(steps_per_second(job_events(stack, job["id"])))
        for i in range(startup_rounds):
            start, events = bare_torchrun(
                "jobs.recipes.synthetic", STARTUP_CONFIG, scratch / f"s{i}"
            )
            bare_start.append(first_step_ts(events) - start)
            start, job = submit_and_wait(http, stack, spec("p2", "synthetic", STARTUP_CONFIG))
            lb_start.append(first_step_ts(job_events(stack, job["id"])) - start)
    ratios = [lb / bare for lb, bare in zip(lb_speed, bare_speed, strict=True)]
    ratio = median(ratios)
    ratio_one = median([lb / bare for lb, bare in zip(lb_one, bare_one, strict=True)])
    overhead = median(lb_start) - median(bare_start)
    return [
        Result(
            "P1",
            "training steps/s, digits recipe, 2 ranks: Launchbay ÷ bare torchrun",
            f"{ratio:.3f} ({median(lb_speed):.1f} vs {median(bare_speed):.1f} steps/s, "
            f"median of {rounds} pairs)",
            "≥ 0.99",
            ratio >= 0.99,
            "both cores run ranks, so the worker's CPU time is taken from them (see P1b)",
        ),
        Result(
            "P1b",
            "the same with 1 rank, leaving a core to the worker: Launchbay ÷ bare torchrun",
            f"{ratio_one:.3f} ({median(lb_one):.1f} vs {median(bare_one):.1f} steps/s)",
            "≥ 0.99",
            ratio_one >= 0.99,
        ),
        Result(
            "P2",
            "submit → first rank-0 step, minus bare torchrun start → first step",
            f"{overhead:+.2f} s (median {median(lb_start):.2f} s vs "
            f"{median(bare_start):.2f} s, {startup_rounds} runs each)",
            "≤ 0.5 s",
            overhead <= 0.5,
        ),
    ]
