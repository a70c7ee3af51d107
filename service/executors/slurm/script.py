"""The sbatch script of one attempt: pure, so `launchbay submit --dry-run` shows exactly what
`SlurmExecutor.submit` hands to `sbatch`.

One allocation of `nnodes` nodes, one task per node; the task is the Launchbay supervisor
(`worker.slurm_node`), which reads the job from the database, joins the attempt as its node
(`SLURM_NODEID`), launches torchrun with `nproc_per_node` ranks and records how it ended.
Nothing from the spec but numbers is written into the script: the supervisor reads the rest
(command, env, config) from the database, as an RQ worker does.
"""

import math
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from jobs.contract.data_dir import DataLayout
from jobs.spec import JobSpec
from service.executors.slurm.queues import SlurmQueue

# The prefix of every Slurm job name Launchbay submits: `launchbay-<job id>-<attempt>`.
JOB_NAME_PREFIX = "launchbay-"
# Room between the spec's timeout_s (enforced by the supervisor, which records `timeout`
# itself) and the allocation's time limit: the grace to stop the ranks, plus start-up.
TIME_LIMIT_MARGIN_S = 120


def slurm_job_name(job_id: str, attempt: int) -> str:
    return f"{JOB_NAME_PREFIX}{job_id}-{attempt}"


@dataclass(frozen=True)
class SbatchPlan:
    job_name: str
    script: str
    output: Path


def time_limit_for(spec: JobSpec, queue: SlurmQueue, grace_s: float) -> str | None:
    """`--time`: from the spec's timeout_s (in whole minutes, with room for the supervisor to
    stop the ranks and record `timeout` itself), else the queue's default."""
    if spec.timeout_s is not None:
        return str(math.ceil((spec.timeout_s + grace_s + TIME_LIMIT_MARGIN_S) / 60))
    return queue.time_limit


def resource_lines(spec: JobSpec, queue: SlurmQueue) -> list[str]:
    lines = [f"--nodes={spec.nnodes}", "--ntasks-per-node=1"]
    if spec.device == "cuda" or (spec.device == "auto" and queue.gpus):
        lines += [f"--gpus-per-node={spec.nproc_per_node}"]
    lines += [f"--cpus-per-task={spec.nproc_per_node}"]
    if spec.memory_limit_bytes is not None:
        # Per node, as the spec's limit; Slurm enforces it where its cgroup plugins do.
        lines += [f"--mem={math.ceil(spec.memory_limit_bytes / 2**20)}M"]
    return lines


def build_sbatch_script(
    job_id: str,
    attempt: int,
    spec: JobSpec,
    queue: SlurmQueue,
    *,
    data_dir: Path,
    grace_s: float,
    python: str | None = None,
) -> SbatchPlan:
    """The script `sbatch` runs for attempt `attempt` of the job."""
    name = slurm_job_name(job_id, attempt)
    output = DataLayout(data_dir).slurm_output(job_id, attempt)
    options = [
        f"--job-name={name}",
        f"--partition={queue.partition}",
        *([f"--account={queue.account}"] if queue.account else []),
        *([f"--qos={queue.qos}"] if queue.qos else []),
        *resource_lines(spec, queue),
    ]
    limit = time_limit_for(spec, queue, grace_s)
    if limit is not None:
        options.append(f"--time={limit}")
    options += [
        f"--output={output}",
        "--open-mode=append",
        # Launchbay makes a new attempt itself (resuming from the latest checkpoint).
        "--no-requeue",
        # The service's LAUNCHBAY_* settings reach the supervisor through the environment.
        "--export=ALL",
    ]
    interpreter = shlex.quote(python or queue.python or sys.executable)
    lines = ["#!/bin/bash", *(f"#SBATCH {o}" for o in options)]
    lines += [
        "set -euo pipefail",
        "# One Launchbay supervisor per node; node 0 hosts the rendezvous.",
        f"exec srun --nodes={spec.nnodes} --ntasks-per-node=1 --kill-on-bad-exit=0 \\",
        f"  {interpreter} -m worker.slurm_node {shlex.quote(job_id)} {attempt}",
        "",
    ]
    return SbatchPlan(name, "\n".join(lines), output)
