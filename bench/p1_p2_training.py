"""P1: training steps/s under Launchbay ÷ bare torchrun. P2: submit → first rank-0 step under
Launchbay, minus bare torchrun's start → first step. With Ray installed, the same program also
runs through Ray Jobs in the same rounds (the peer baseline, rows P1-ray and P2-ray).

Every round runs each way once, in an order that rotates from round to round (bare, Launchbay,
Ray; then Launchbay, Ray, bare; ...), and each ratio or difference is taken within a round, so
a drift of the machine's speed between rounds cancels. Steps/s is the steady rate between the
first and the last metric line rank 0 writes (start-up left out). While a job trains, its end
is polled once a second, Launchbay's and Ray's alike: each poll is CPU taken from the ranks.

`python -m bench training` takes about 5 minutes here; `python -m bench training --long` runs
P1 alone in 6 rounds of 3,000 steps (P1L: about 4.5 minutes on a quiet machine, 7 with Ray),
long enough to resolve 2 %. In each Launchbay run of P1L, the CPU time and wake-ups of
Launchbay's own processes (the worker, its supervisor of the job, the API) are counted from
/proc over 8 s of steady training (`bench.p1_counts`).
"""

import statistics
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

from bench.common import (
    Result,
    attempt_paths,
    bare_torchrun,
    first_step_ts,
    job_events,
    median,
    recipe_spec,
    running_stack,
    steps_per_second,
    submit_and_wait,
)
from bench.p1_counts import Totals, TrainingWindow, service_pids
from bench.ray_peer import RayCluster, ray_available
from devstack.stack import Stack
from jobs.contract.data_dir import DataLayout

THROUGHPUT_CONFIG: dict[str, Any] = {"epochs": 40, "log_every_steps": 10}
LONG_CONFIG: dict[str, Any] = {"steps": 3000, "log_every_steps": 50}
LONG_ROUNDS = 6
STARTUP_CONFIG: dict[str, Any] = {"epochs": 1, "log_every_steps": 1}
WHILE_TRAINING_POLL_S = 1.0
NOT_RUN = "not run: Ray is not installed (`pip install -e '.[bench]'`)"

T = TypeVar("T")
Run = Callable[[str, dict[str, Any], Path, int], tuple[float, list[dict[str, Any]]]]


def rotated(ways: list[T], i: int) -> list[T]:
    """Round `i`'s order: the ways rotated left by `i`."""
    k = i % len(ways)
    return ways[k:] + ways[:k]


def spread(values: list[float]) -> str:
    """min–max, and the quartiles when there are enough values."""
    text = f"{min(values):.3f}–{max(values):.3f}"
    if len(values) >= 4:
        q1, _, q3 = statistics.quantiles(values, n=4)
        text += f", quartiles {q1:.3f}–{q3:.3f}"
    return text


def ratio_result(
    rid: str,
    what: str,
    way: list[float],
    bare: list[float],
    goal: str,
    met: bool | None,
    notes: str,
) -> Result:
    ratios = [w / b for w, b in zip(way, bare, strict=True)]
    ratio = median(ratios)
    return Result(
        rid,
        what,
        f"{ratio:.3f} ({median(way):.1f} vs {median(bare):.1f} steps/s; median of "
        f"{len(ratios)} rounds, ratios {spread(ratios)})",
        goal,
        met if met is None else met and ratio >= 0.99,
        notes,
    )


def run(long: bool = False) -> list[Result]:
    with ExitStack() as context:
        stack = context.enter_context(running_stack())
        http = context.enter_context(stack.client())
        ray = context.enter_context(RayCluster()) if ray_available() else None
        scratch = Path(tempfile.mkdtemp(prefix="launchbay-bench-p1-"))

        service_use: list[Totals] = []

        def launchbay(
            module: str, config: dict[str, Any], workdir: Path, nproc: int, poll_s: float = 0.2
        ) -> tuple[float, list[dict[str, Any]]]:
            recipe = module.rsplit(".", 1)[-1]
            spec = recipe_spec(workdir.name, recipe, config, nproc)
            if not long:
                start, job = submit_and_wait(http, stack, spec, poll_s=poll_s)
                return start, job_events(stack, job["id"])
            with service_window(stack, workdir.name) as window:
                start, job = submit_and_wait(http, stack, spec, poll_s=poll_s)
            if window.totals is not None:
                service_use.append(window.totals)
            return start, job_events(stack, job["id"])

        runs: dict[str, Callable[..., tuple[float, list[dict[str, Any]]]]] = {
            "bare": bare_torchrun,
            "launchbay": launchbay,
        }
        if ray is not None:
            runs["ray"] = ray.torchrun
        if long:
            return long_rounds(runs, scratch, service_use)
        return short_rounds(runs, scratch, ray is not None)


def speeds(
    runs: dict[str, Callable[..., tuple[float, list[dict[str, Any]]]]],
    scratch: Path,
    config: dict[str, Any],
    rounds: int,
    nproc: int,
    tag: str,
) -> dict[str, list[float]]:
    ways = list(runs)
    measured: dict[str, list[float]] = {way: [] for way in ways}
    for i in range(rounds):
        for way in rotated(ways, i):
            workdir = scratch / f"{tag}-{way}-{i}"
            kwargs = {} if way == "bare" else {"poll_s": WHILE_TRAINING_POLL_S}
            _, events = runs[way]("jobs.recipes.digits", config, workdir, nproc, **kwargs)
            measured[way].append(steps_per_second(events))
    return measured


RAY_STARTUP_NOT_RUN = Result(
    "P2-ray", "submit → first step through Ray Jobs, minus bare", NOT_RUN, "report", None
)


def short_rounds(
    runs: dict[str, Callable[..., tuple[float, list[dict[str, Any]]]]],
    scratch: Path,
    with_ray: bool,
    rounds: int = 5,
    one_rank_rounds: int = 3,
    startup_rounds: int = 5,
) -> list[Result]:
    two = speeds(runs, scratch, THROUGHPUT_CONFIG, rounds, 2, "n2")
    one = speeds(
        {k: v for k, v in runs.items() if k != "ray"},
        scratch,
        THROUGHPUT_CONFIG,
        one_rank_rounds,
        1,
        "n1",
    )
    starts: dict[str, list[float]] = {way: [] for way in runs}
    for i in range(startup_rounds):
        for way in rotated(list(runs), i):
            start, events = runs[way](
                "jobs.recipes.synthetic", STARTUP_CONFIG, scratch / f"s-{way}-{i}", 2
            )
            starts[way].append(first_step_ts(events) - start)
    bare = two["bare"]
    aa = [a / b for a, b in zip(bare, bare[1:], strict=False)]
    lb_vs_ray = ""
    if with_ray:
        below = sum(lb < r for lb, r in zip(two["launchbay"], two["ray"], strict=True))
        lb_vs_ray = f"; Launchbay below Ray in {below} of {rounds} rounds"
    rows = [
        ratio_result(
            "P1",
            "training steps/s, digits recipe, 2 ranks: Launchbay ÷ bare torchrun",
            two["launchbay"],
            bare,
            "≥ 0.99",
            True,
            f"bare ÷ the next bare run: {min(aa):.3f}–{max(aa):.3f}; "
            f"{THROUGHPUT_CONFIG['epochs']} epochs a run, order rotated{lb_vs_ray}; "
            "short rounds: `python -m bench training --long` resolves 2 % (P1L)",
        ),
        peer_row("P1-ray", "the same through Ray Jobs: Ray ÷ bare torchrun", two.get("ray"), bare),
        ratio_result(
            "P1b",
            "the same with 1 rank, leaving a core to the worker: Launchbay ÷ bare torchrun",
            one["launchbay"],
            one["bare"],
            "≥ 0.99",
            True,
            "",
        ),
        startup_result("P2", "Launchbay", starts["launchbay"], starts["bare"], "≤ 0.5 s", True),
    ]
    rows.append(ray_startup_row(starts) if with_ray else RAY_STARTUP_NOT_RUN)
    return rows


def ray_startup_row(starts: dict[str, list[float]]) -> Result:
    return startup_result("P2-ray", "Ray Jobs", starts["ray"], starts["bare"], "report", None)


def peer_row(rid: str, what: str, peer: list[float] | None, bare: list[float]) -> Result:
    if peer is None:
        return Result(rid, what, NOT_RUN, "report", None)
    return ratio_result(rid, what, peer, bare, "report", None, "same rounds as the row above")


def startup_result(
    rid: str, name: str, way: list[float], bare: list[float], goal: str, met: bool | None
) -> Result:
    differences = [w - b for w, b in zip(way, bare, strict=True)]
    overhead = median(differences)
    return Result(
        rid,
        f"submit → first rank-0 step through {name}, minus bare torchrun start → first step",
        f"{overhead:+.2f} s (median of {len(way)} rounds, differences {min(differences):+.2f} "
        f"to {max(differences):+.2f} s; medians {median(way):.2f} s vs {median(bare):.2f} s)",
        goal,
        None if met is None else overhead <= 0.5,
        "synthetic recipe, 2 ranks, 1 epoch; order rotated each round",
    )


def service_window(stack: Stack, name: str) -> TrainingWindow:
    """Launchbay's processes (the worker and its work horse, not the job's; the API) over a
    window of the job called `name`'s steady training."""

    def find_events() -> Path | None:
        jobs = DataLayout(stack.data_dir).runs.glob("*")
        files = [f for job in jobs if (f := attempt_paths(stack, job.name).events_file).exists()]
        found = sorted(files, key=lambda p: p.stat().st_mtime)
        return found[-1] if found else None

    return TrainingWindow(find_events, lambda: service_pids(stack))


def long_rounds(
    runs: dict[str, Callable[..., tuple[float, list[dict[str, Any]]]]],
    scratch: Path,
    service_use: list[Totals],
    rounds: int = LONG_ROUNDS,
) -> list[Result]:
    measured = speeds(runs, scratch, LONG_CONFIG, rounds, 2, "long")
    bare = measured["bare"]
    steps = LONG_CONFIG["steps"]
    notes = f"{steps} steps a run, order rotated each round"
    if service_use:
        cpu = [t.cpu_s * 1e3 for t in service_use]
        wakeups = [float(t.voluntary) for t in service_use]
        notes += (
            f"; Launchbay's processes while the job trained: {median(cpu):.1f} ms of CPU a second "
            f"(runs {min(cpu):.1f}–{max(cpu):.1f}), {median(wakeups):.0f} wake-ups a second"
        )
    if "ray" in measured:
        below = sum(lb < r for lb, r in zip(measured["launchbay"], measured["ray"], strict=True))
        notes += f"; Launchbay below Ray in {below} of {rounds} rounds"
    return [
        ratio_result(
            "P1L",
            "training steps/s in long rounds, digits recipe, 2 ranks: Launchbay ÷ bare torchrun",
            measured["launchbay"],
            bare,
            "≥ 0.99",
            True,
            notes,
        ),
        peer_row(
            "P1L-ray", "the same through Ray Jobs: Ray ÷ bare torchrun", measured.get("ray"), bare
        ),
    ]
