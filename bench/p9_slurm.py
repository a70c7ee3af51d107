"""P9: `POST /v1/jobs` → the first rank-0 step, through Slurm ÷ through an RQ worker, on the
same machine, the same stack and the same job (synthetic recipe, 2 ranks, torchrun, gloo).

Slurm is a private single-machine cluster (devstack/slurm.py: munged, slurmctld, one slurmd;
`sched/builtin`, which schedules at each submission, `proctrack/linuxproc`, no accounting).
The first step's time is the `ts` of the first metric point, written by rank 0 itself, on
this machine's clock. Rounds alternate, one job at a time; the first of each is a warm-up
and dropped. Medians.

Needs root and Debian's Slurm (scripts/install-slurm.sh).
"""

import json
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import NO_CHECKPOINTS, Result, median, running_stack
from bench.p6_queue import timestamp
from devstack.slurm import PARTITION, SlurmCluster, unavailable
from devstack.stack import Stack
from jobs.states import JobState

SLURM_QUEUE = "bench-slurm"
ROUNDS = 4
SPEC = {
    "name": "p9",
    "recipe": "synthetic",
    "nproc_per_node": 2,
    "config": {"epochs": 1, "num_samples": 64, "log_every_steps": 1},
    "checkpoint": NO_CHECKPOINTS,
}


def first_step_after_post(http: httpx.Client, stack: Stack, queue: str) -> tuple[float, float]:
    """(seconds to the job's `started_at`: its supervisor took it, seconds to the first
    rank-0 step), both from the moment before the POST."""
    before = time.time()
    response = http.post("/v1/jobs", json={**SPEC, "queue": queue})
    response.raise_for_status()
    job_id = response.json()["id"]
    job = stack.wait_for_state(http, job_id, {JobState.SUCCEEDED}, timeout=300, interval=0.2)
    points = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()["items"]
    return timestamp(job["started_at"]) - before, min(p["ts"] for p in points) - before


def run() -> list[Result]:
    reason = unavailable()
    if reason is not None:
        return [Result("P9", "Slurm ÷ RQ: POST → first rank-0 step", "-", "report", None, reason)]
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="launchbay-bench-slurm-")))
    try:
        cluster.start()
        queues = {SLURM_QUEUE: {"partition": PARTITION}}
        env = {"LAUNCHBAY_SLURM_QUEUES": json.dumps(queues), **cluster.env()}
        with running_stack(**env) as stack, stack.client() as http:
            times: dict[str, list[float]] = {"default": [], SLURM_QUEUE: []}
            taken: dict[str, list[float]] = {"default": [], SLURM_QUEUE: []}
            for _ in range(ROUNDS):
                for queue in times:
                    started, first_step = first_step_after_post(http, stack, queue)
                    taken[queue].append(started)
                    times[queue].append(first_step)
    finally:
        cluster.stop()
    rq, slurm = median(times["default"][1:]), median(times[SLURM_QUEUE][1:])
    rq_taken, slurm_taken = median(taken["default"][1:]), median(taken[SLURM_QUEUE][1:])
    ratio = slurm / rq
    return [
        Result(
            "P9",
            "POST /v1/jobs → first rank-0 step: through Slurm ÷ through an RQ worker",
            f"{ratio:.2f} ({slurm:.2f} s ÷ {rq:.2f} s, medians of {ROUNDS - 1}; Slurm "
            f"{min(times[SLURM_QUEUE][1:]):.2f}–{max(times[SLURM_QUEUE][1:]):.2f} s, RQ "
            f"{min(times['default'][1:]):.2f}–{max(times['default'][1:]):.2f} s; the attempt "
            f"taken (started_at) after {slurm_taken:.2f} s on Slurm, {rq_taken:.2f} s on RQ)",
            "report",
            None,
            f"private Slurm up in {cluster.started_in_s:.1f} s; sched/builtin, "
            "SchedulerParameters=sched_min_interval=100000 (µs), proctrack/linuxproc",
        )
    ]
