"""The Launchbay supervisor on one node of an executor's allocation, without RQ:
`python -m worker.node JOB_ID ATTEMPT [--node N] [--executor NAME]`, started by the
executor's backend once per node (Slurm's `srun`, from the sbatch script; the old entry
`python -m worker.slurm_node JOB_ID ATTEMPT`, which that script names, is this with
`--executor slurm`).

It runs the attempt exactly as an RQ worker does (`worker.attempt`: take or join it,
prepare, launch torchrun, monitor, ingest, register checkpoints, heartbeat, record the end),
with what the executor's backend says about the allocation (`--executor`: its placement,
`service.executors.registry.placement_for`), else what the command line says:

- the node: a single-node job has no node number, as on RQ; on a multi-node job the first
  node hosts torch's rendezvous, so the other nodes join the attempt only once it has;
- the address the other nodes reach this one at: `LAUNCHBAY_WORKER_HOST`, else what the
  backend knows of the node (Slurm's `NodeAddr`);
- a SIGTERM (the backend cancelling the allocation, its time limit, a preemption) stops the
  ranks within the cancel grace and records nothing: the reaper records the end the backend
  gives, if it gives one (`service.reaper.reap_ended_tasks`).

Exit status: 0 when the attempt succeeded or was not this node's to run, 1 when it failed,
143 when it was stopped by a SIGTERM.
"""

import argparse
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import replace

from sqlmodel import Session

from jobs.states import AttemptRef, JobState
from service.executors.base import NodePlacement
from service.executors.registry import placement_for
from service.models import JobNode
from worker.attempt import run_taken, take_attempt
from worker.context import AttemptServices, WorkerContext
from worker.process_tree import request_shutdown, shutdown_requested

log = logging.getLogger("launchbay.node")
# How often a node other than the first looks whether the first has joined.
FIRST_NODE_POLL_S = 0.2


def wait_for_first_node(services: AttemptServices, ref: AttemptRef, timeout_s: float) -> bool:
    """Wait until node 0 has joined the attempt (it hosts the rendezvous); False if it did
    not within `timeout_s`, or the attempt is over."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not shutdown_requested():
        with Session(services.engine) as session:
            if session.get(JobNode, (ref.job_id, ref.attempt, 0)) is not None:
                return True
        time.sleep(FIRST_NODE_POLL_S)
    return False


def find_placement(
    executor: str | None, node: int | None, environ: Mapping[str, str]
) -> NodePlacement:
    """Where this node runs: as the executor's backend tells it, else `node` on this host."""
    found = placement_for(executor, environ) if executor is not None else None
    if found is not None:
        return found
    return NodePlacement(node=node, worker_name=f"{socket.gethostname()}:{os.getpid()}")


def run_node(
    job_id: str,
    attempt: int,
    environ: Mapping[str, str],
    *,
    node: int | None = None,
    executor: str | None = None,
) -> int:
    signal.signal(signal.SIGTERM, request_shutdown)
    placement = find_placement(executor, node, environ)
    context = WorkerContext()
    settings = context.settings
    if "LAUNCHBAY_WORKER_HOST" not in environ:
        address = placement.address()
        if address:
            settings = settings.model_copy(update={"worker_host": address})
            context = WorkerContext(settings)
    # One attempt per process: no fork server outlives it to serve the next (cold starts).
    services = replace(context.services(), warm_pool=None)
    ref = AttemptRef(job_id, attempt, placement.node)
    if ref.node is not None and ref.node > 0:
        if not wait_for_first_node(services, ref, settings.rendezvous_timeout_s):
            log.warning("%s: the allocation's first node never joined; not started", ref)
            return 0
    taken = take_attempt(services, ref, worker_name=placement.worker_name)
    if taken is None:
        return 0
    result = run_taken(services, taken, leave_shutdown=True)
    if shutdown_requested():
        return 143
    # The backend's record says what its users expect (sacct): a job that failed failed; one
    # cancelled through Launchbay (stopped by its supervisor before the backend's cancel)
    # ended as asked.
    ended = result.outcome.state if result.outcome is not None else None
    return 0 if ended in (JobState.SUCCEEDED, JobState.CANCELLED) else 1


def main(argv: list[str] | None = None, *, executor: str | None = None) -> None:
    """The command line; `executor` is the default of `--executor` (the old Slurm entry's)."""
    parser = argparse.ArgumentParser(prog="python -m worker.node", description=__doc__)
    parser.add_argument("job_id")
    parser.add_argument("attempt", type=int)
    parser.add_argument("--node", type=int, default=None, help="this node's number")
    parser.add_argument("--executor", default=executor, help="whose allocation this runs in")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    code = run_node(
        args.job_id, args.attempt, dict(os.environ), node=args.node, executor=args.executor
    )
    sys.exit(code)


if __name__ == "__main__":
    main()
