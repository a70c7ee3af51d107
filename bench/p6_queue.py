"""P6: queue overhead per job. `POST /v1/jobs` → the worker starting the launcher, ÷ RQ's own
enqueue → perform of a no-op on the same Redis.

Launchbay: the clock is read before the POST; the launcher's start is the birth time of the
attempt's `logs/launcher.log`, which `worker.process_tree.start_launcher` creates right before
it forks torchrun (statx birth time, ns resolution, same clock). The job's `started_at` (the
worker taking the job) splits the delay into queue and preparation.

Bare RQ: a plain `rq worker` process (RQ's default, which forks a work horse per job;
Launchbay's worker forks none) on its own queue; `Queue.enqueue("time.time")` runs the no-op
whose return value is the clock read inside the work horse (a builtin: the horse imports
nothing to run it).

Rounds alternate, one job at a time, each worker idle before its job; the first round of
each is a warm-up and dropped. Medians.
"""

import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
from redis import Redis
from rq import Queue
from rq.job import Job as RQJob
from rq.job import JobStatus

from bench.common import (
    MARKER,
    NO_CHECKPOINTS,
    Result,
    attempt_paths,
    birth_time,
    median,
    running_stack,
)
from devstack.procs import SESSION_MARKER, start, stop
from devstack.stack import Stack
from jobs.states import JobState
from service.executors.rq import rq_job_id

BARE_QUEUE = "bench-p6-bare"
RQ = str(Path(sys.executable).parent / "rq")
SPEC = {
    "name": "p6",
    "recipe": "synthetic",
    "nproc_per_node": 1,
    "config": {"epochs": 1, "num_samples": 64},
    "checkpoint": NO_CHECKPOINTS,
}


def timestamp(iso: str) -> float:
    moment = datetime.fromisoformat(iso)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass
class LaunchbayRound:
    """Seconds from the moment before the POST to each step of the way."""

    answered: float  # the POST's answer
    rq_started: float  # the worker starting to perform the task (RQ's own started_at)
    started: float  # the job's started_at: the worker's take_attempt took it
    launched: float  # launcher.log created, right before torchrun is forked


def launchbay_round(http: httpx.Client, stack: Stack, redis: Redis) -> LaunchbayRound:
    before = time.time()
    response = http.post("/v1/jobs", json=SPEC)
    answered = time.time()
    response.raise_for_status()
    job_id = response.json()["id"]
    job = stack.wait_for_state(http, job_id, {JobState.SUCCEEDED}, timeout=120, interval=0.1)
    launcher_log = attempt_paths(stack, job_id).launcher_log
    rq_job = RQJob.fetch(rq_job_id(job_id, 1), connection=redis)
    assert rq_job.started_at is not None
    return LaunchbayRound(
        answered=answered - before,
        rq_started=rq_job.started_at.replace(tzinfo=UTC).timestamp() - before,
        started=timestamp(job["started_at"]) - before,
        launched=birth_time(launcher_log) - before,
    )


def bare_round(queue: Queue) -> float:
    """Enqueue → the clock read inside the no-op, in seconds."""
    before = time.time()
    job = queue.enqueue("time.time", result_ttl=600)
    deadline = time.monotonic() + 60
    while (status := job.get_status()) != JobStatus.FINISHED:
        if status == JobStatus.FAILED or time.monotonic() > deadline:
            raise RuntimeError(f"bare RQ job {job.id} is {status}")
        time.sleep(0.01)
    performed = RQJob.fetch(job.id, connection=queue.connection).return_value()
    if not isinstance(performed, float):
        raise RuntimeError(f"bare RQ job {job.id} returned {performed!r}")
    return performed - before


def run(rounds: int = 11, settle_s: float = 0.5) -> list[Result]:
    lb: list[LaunchbayRound] = []
    bare: list[float] = []
    with running_stack() as stack, stack.client() as http:
        env = {**os.environ, SESSION_MARKER: MARKER}
        argv = [RQ, "worker", "--url", stack.redis_url, "--quiet", BARE_QUEUE]
        rq_worker = start(argv, env, stack.root / "rq-bare-worker.log")
        try:
            redis = Redis.from_url(stack.redis_url)
            queue = Queue(BARE_QUEUE, connection=redis)
            for _ in range(rounds):
                lb.append(launchbay_round(http, stack, redis))
                time.sleep(settle_s)
                bare.append(bare_round(queue))
                time.sleep(settle_s)
        finally:
            stop(rq_worker)
    lb, bare = lb[1:], bare[1:]

    def ms(field: str) -> str:
        return f"{1000 * median([getattr(r, field) for r in lb]):.0f} ms"

    launch = median([r.launched for r in lb])
    ratio = launch / median(bare)
    return [
        Result(
            "P6",
            "POST /v1/jobs → worker starts the launcher ÷ bare RQ enqueue → perform (no-op)",
            f"{ratio:.1f}× ({1000 * launch:.0f} ms vs {1000 * median(bare):.0f} ms, medians of "
            f"{len(bare)}, bare range {1000 * min(bare):.0f}–{1000 * max(bare):.0f} ms; "
            f"Launchbay after the POST: answered {ms('answered')}, RQ task performing "
            f"{ms('rq_started')}, job started_at {ms('started')}, launcher {ms('launched')})",
            "≤ 2×",
            ratio <= 2,
            "launcher start = launcher.log birth time; bare: RQ's default (forking) worker; "
            "one Redis, idle workers, one job at a time",
        )
    ]
