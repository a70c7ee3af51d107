"""P9f: what the dispatcher costs a job on an idle install, side by side in one run.

Each round submits one small training job (P6's: the `synthetic` recipe, one rank, one
epoch of 64 samples, no checkpoint) down each path, and one bare RQ no-op, in an order that
rotates from round to round (so that neither path always runs right after the other):

- `dispatcher`: `POST /v1/jobs` to an API whose dispatcher admits the job onto its one
  worker (`--slots 1`) and hands it to the worker's own queue;
- `rq`: the hand-over without the dispatcher: the job's row made by this process and its
  attempt enqueued with `RQExecutor.submit` onto the shared `default` queue of a worker
  with no API beside it (what `POST /v1/jobs` did before every job went through the
  dispatcher; no HTTP, so it is the cheaper of the two);
- bare RQ: `Queue.enqueue("time.time")` on a plain `rq worker` (P6's baseline).

From the moment before the submission: the launcher's start (birth time of the attempt's
launcher.log, as P6) and the first training step (the `ts` of rank 0's first metric line).
The first round is a warm-up and dropped; medians.
"""

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
from redis import Redis
from rq import Queue
from sqlmodel import Session

from bench.common import (
    MARKER,
    Result,
    attempt_paths,
    birth_time,
    first_step_ts,
    job_events,
    median,
)
from bench.p6_queue import SPEC, bare_round
from devstack.procs import SESSION_MARKER, start, stop
from devstack.services import private_redis
from devstack.stack import Stack
from jobs.spec import JobSpec
from jobs.states import JobState
from service import records
from service.db import make_engine, upgrade_database
from service.executors.rq import RQExecutor
from service.models import Job

BARE_QUEUE = "bench-p9f-bare"
RQ = str(Path(sys.executable).parent / "rq")
# (launcher start, first step) in seconds after the submission.
Timing = tuple[float, float]


def make_stack(root: Path, redis_url: str, **env: str) -> Stack:
    root.mkdir(parents=True, exist_ok=True)
    return Stack(
        root=root,
        database_url=f"sqlite:///{root / 'data' / 'launchbay.db'}",
        redis_url=redis_url,
        marker=MARKER,
        extra_env={"LAUNCHBAY_SUBMISSIONS_PER_MINUTE": "0", **env},
    )


def timing(stack: Stack, job_id: str, before: float) -> Timing:
    launched = birth_time(attempt_paths(stack, job_id).launcher_log) - before
    return launched, first_step_ts(job_events(stack, job_id)) - before


@contextmanager
def api_path(root: Path, redis_url: str, **env: str) -> Iterator[Callable[[], Timing]]:
    """POST /v1/jobs to an API with one worker."""
    stack = make_stack(root, redis_url, **env)
    try:
        stack.start_api()
        stack.start_worker(args=["--slots", "1"])
        with stack.client() as http:
            wait_for_workers(http, 1)

            def round_() -> Timing:
                before = time.time()
                response = http.post("/v1/jobs", json=SPEC)
                response.raise_for_status()
                job_id = response.json()["id"]
                stack.wait_for_state(http, job_id, {JobState.SUCCEEDED}, interval=0.05)
                return timing(stack, job_id, before)

            yield round_
    finally:
        stack.stop()


@contextmanager
def rq_path(root: Path, redis_url: str) -> Iterator[Callable[[], Timing]]:
    """The job's row made here, its attempt enqueued by `RQExecutor` on the queue of a worker
    with no API (so no dispatcher) beside it."""
    stack = make_stack(root, redis_url)
    upgrade_database(stack.database_url)
    engine = make_engine(stack.database_url)
    executor = RQExecutor(Redis.from_url(redis_url), grace_s=3)
    spec = JobSpec.model_validate(SPEC)
    try:
        stack.start_worker(args=["--slots", "1"])
        deadline = time.monotonic() + 120
        while not any(k for k in Redis.from_url(redis_url).scan_iter("launchbay:worker:*")):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start:\n{stack.worker_logs()}")
            time.sleep(0.1)

        def round_() -> Timing:
            before = time.time()
            with Session(engine) as session:
                job = records.create_job(session, spec, owner="admin")
                executor.submit(job)
                job_id = job.id
            deadline = time.monotonic() + 120
            while True:
                with Session(engine) as session:
                    state = session.get(Job, job_id).state  # type: ignore[union-attr]
                if state == JobState.SUCCEEDED:
                    return timing(stack, job_id, before)
                if JobState(state).is_terminal() or time.monotonic() > deadline:
                    raise RuntimeError(f"job {job_id} is {state}:\n{stack.worker_logs()}")
                time.sleep(0.05)

        yield round_
    finally:
        stack.stop()
        engine.dispose()


def wait_for_workers(http: httpx.Client, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(http.get("/v1/workers").json()["items"]) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} workers came up")
        time.sleep(0.2)


def path_timings(
    rounds: int = 17, settle_s: float = 0.3
) -> tuple[dict[str, list[Timing]], list[float]]:
    root = Path(tempfile.mkdtemp(prefix="launchbay-bench-p9f-"))
    root.chmod(0o711)
    seen: dict[str, list[Timing]] = {"dispatcher": [], "rq": []}
    bare: list[float] = []
    with private_redis() as server, ExitStack() as stack:
        paths = {
            "dispatcher": stack.enter_context(api_path(root / "dispatcher", server.url(0))),
            "rq": stack.enter_context(rq_path(root / "rq", server.url(1))),
        }
        env = {**os.environ, SESSION_MARKER: MARKER}
        argv = [RQ, "worker", "--url", server.url(2), "--quiet", BARE_QUEUE]
        bare_worker = start(argv, env, root / "rq-bare-worker.log")
        try:
            queue = Queue(BARE_QUEUE, connection=Redis.from_url(server.url(2)))
            order = [*paths, "bare"]
            for number in range(rounds):
                for name in order[number % 3 :] + order[: number % 3]:
                    if name == "bare":
                        bare.append(bare_round(queue))
                    else:
                        seen[name].append(paths[name]())
                    time.sleep(settle_s)
        finally:
            stop(bare_worker)
    return {name: t[1:] for name, t in seen.items()}, bare[1:]


def run() -> list[Result]:
    seen, bare = path_timings()

    def ms(values: list[float]) -> str:
        return f"{1000 * median(values):.0f} ms"

    launch = {name: [t[0] for t in ts] for name, ts in seen.items()}
    first = {name: [t[1] for t in ts] for name, ts in seen.items()}
    ratio = median(first["dispatcher"]) / median(first["rq"])
    results = [
        Result(
            "P9f-rq",
            "submission → first training step, dispatcher ÷ rq",
            f"{ratio:.3f} ({ms(first['dispatcher'])} vs {ms(first['rq'])}; launcher start "
            f"{ms(launch['dispatcher'])} vs {ms(launch['rq'])}; medians of {len(first['rq'])})",
            "≤ 1.05",
            ratio <= 1.05,
            "one synthetic 1-rank job at a time on idle one-slot workers, the order of the "
            "paths rotating each round; first step = rank 0's first metric line",
        )
    ]
    for name in seen:
        ratio = median(launch[name]) / median(bare)
        results.append(
            Result(
                f"P6-{name}",
                f"submission ({name}) → worker starts the launcher ÷ bare RQ enqueue → perform",
                f"{ratio:.1f}× ({ms(launch[name])} vs {ms(bare)}, medians of {len(bare)})",
                "≤ 2×",
                ratio <= 2,
                "as P6, the paths side by side in one run",
            )
        )
    return results


if __name__ == "__main__":
    for result in run():
        print(result.row(), flush=True)
