"""P1: training steps/s under Launchbay ÷ bare torchrun.
P2: submit → first rank-0 step under Launchbay, minus bare torchrun's start → first step.

The same recipe program runs both ways, alternately, in the same run of this script. Runs of
the same program vary by up to ±20 % here from one to the next (either way; P1's notes give the
spread between consecutive bare runs), so P1 takes the median ratio of several pairs and P2
the median difference of several pairs, and which of the two runs first alternates from pair
to pair.
"""

import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.common import (
    Result,
    bare_torchrun,
    first_step_ts,
    job_events,
    median,
    recipe_spec,
    running_stack,
    steps_per_second,
    submit_and_wait,
)

THROUGHPUT_CONFIG = {"epochs": 40, "log_every_steps": 10}
STARTUP_CONFIG = {"epochs": 1, "log_every_steps": 1}


def in_turn(i: int, bare_run: Callable[[], None], lb_run: Callable[[], None]) -> None:
    """Pair `i`: bare first when `i` is even, Launchbay first when it is odd."""
    for one in (bare_run, lb_run) if i % 2 == 0 else (lb_run, bare_run):
        one()


def run(rounds: int = 5, one_rank_rounds: int = 4, startup_rounds: int = 7) -> list[Result]:
    scratch = Path(tempfile.mkdtemp(prefix="launchbay-bench-p1-"))
    bare_speed: list[float] = []
    lb_speed: list[float] = []
    bare_one: list[float] = []
    lb_one: list[float] = []
    bare_start: list[float] = []
    lb_start: list[float] = []
    with running_stack() as stack, stack.client() as http:

        def pair(i: int, nproc: int, bare: list[float], lb: list[float]) -> None:
            def bare_run() -> None:
                workdir = scratch / f"n{nproc}-{i}"
                _, events = bare_torchrun("jobs.recipes.digits", THROUGHPUT_CONFIG, workdir, nproc)
                bare.append(steps_per_second(events))

            def lb_run() -> None:
                job_spec = recipe_spec("p1", "digits", THROUGHPUT_CONFIG, nproc)
                _, job = submit_and_wait(http, stack, job_spec)
                lb.append(steps_per_second(job_events(stack, job["id"])))

            in_turn(i, bare_run, lb_run)

        def startup_pair(i: int) -> None:
            def bare_run() -> None:
                workdir = scratch / f"s{i}"
                start, events = bare_torchrun("jobs.recipes.synthetic", STARTUP_CONFIG, workdir)
                bare_start.append(first_step_ts(events) - start)

            def lb_run() -> None:
                job_spec = recipe_spec("p2", "synthetic", STARTUP_CONFIG, 2)
                start, job = submit_and_wait(http, stack, job_spec)
                lb_start.append(first_step_ts(job_events(stack, job["id"])) - start)

            in_turn(i, bare_run, lb_run)

        for i in range(rounds):
            pair(i, 2, bare_speed, lb_speed)
        # The same with one rank, which leaves a core to the worker and the API.
        for i in range(one_rank_rounds):
            pair(i, 1, bare_one, lb_one)
        for i in range(startup_rounds):
            startup_pair(i)
    ratios = [lb / bare for lb, bare in zip(lb_speed, bare_speed, strict=True)]
    ratio = median(ratios)
    # The same program, bare, one run against the next: how far apart two runs fall anyway.
    aa = [a / b for a, b in zip(bare_speed, bare_speed[1:], strict=False)]
    ratios_one = [lb / bare for lb, bare in zip(lb_one, bare_one, strict=True)]
    ratio_one = median(ratios_one)
    differences = [lb - bare for lb, bare in zip(lb_start, bare_start, strict=True)]
    overhead = median(differences)
    return [
        Result(
            "P1",
            "training steps/s, digits recipe, 2 ranks: Launchbay ÷ bare torchrun",
            f"{ratio:.3f} ({median(lb_speed):.1f} vs {median(bare_speed):.1f} steps/s; median "
            f"of {rounds} pairs, ratios {min(ratios):.3f}–{max(ratios):.3f})",
            "≥ 0.99",
            ratio >= 0.99,
            f"bare ÷ the next bare run: {min(aa):.3f}–{max(aa):.3f}; "
            f"{THROUGHPUT_CONFIG['epochs']} epochs a run, the first run of a pair alternates; "
            "both cores run ranks, so the worker's CPU time is taken from them (see P1b)",
        ),
        Result(
            "P1b",
            "the same with 1 rank, leaving a core to the worker: Launchbay ÷ bare torchrun",
            f"{ratio_one:.3f} ({median(lb_one):.1f} vs {median(bare_one):.1f} steps/s, "
            f"median of {one_rank_rounds} pairs, ratios {min(ratios_one):.3f}–"
            f"{max(ratios_one):.3f})",
            "≥ 0.99",
            ratio_one >= 0.99,
        ),
        Result(
            "P2",
            "submit → first rank-0 step, minus bare torchrun start → first step",
            f"{overhead:+.2f} s (median of {startup_rounds} pairs, differences "
            f"{min(differences):+.2f} to {max(differences):+.2f} s; medians "
            f"{median(lb_start):.2f} s vs {median(bare_start):.2f} s)",
            "≤ 0.5 s",
            overhead <= 0.5,
            "synthetic recipe, 2 ranks, 1 epoch; the first run of a pair alternates",
        ),
    ]
