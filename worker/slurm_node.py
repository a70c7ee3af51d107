"""The Launchbay supervisor on one node of a Slurm allocation: `python -m worker.slurm_node
JOB_ID ATTEMPT`, started by `srun` once per node from the sbatch script that
`service.slurm.script` writes.

It runs the attempt exactly as an RQ work horse does (`worker.attempt`: take or join it,
prepare, launch torchrun, monitor, ingest, register checkpoints, heartbeat, record the end),
with what Slurm says about the allocation:

- the node: `SLURM_NODEID` of `SLURM_JOB_NUM_NODES` (a single-node job has no node number,
  as on RQ); the first node of the allocation hosts torch's rendezvous, so the other nodes
  join the attempt only once it has;
- the address the other nodes reach this one at: `LAUNCHBAY_WORKER_HOST`, else the node's
  `NodeAddr` in Slurm;
- a SIGTERM (scancel, the time limit, preemption) stops the ranks within the cancel grace and
  records nothing: the reaper records the end Slurm gives (`service.reaper.reap_ended_tasks`).

Exit status: 0 when the attempt succeeded or was not this node's to run, 1 when it failed,
143 when it was stopped by a SIGTERM.
"""

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import time

from sqlmodel import Session

from jobs.states import AttemptRef, JobState
from service.models import JobNode
from worker.attempt import run_taken, take_attempt
from worker.context import AttemptServices, WorkerContext
from worker.supervise import request_shutdown, shutdown_requested

log = logging.getLogger("launchbay.slurm_node")
# How often a node other than the first looks whether the first has joined.
FIRST_NODE_POLL_S = 0.2


def node_of_allocation(environ: dict[str, str]) -> int | None:
    """This node's number in the attempt: None for a single-node allocation."""
    if int(environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or "1") <= 1:
        return None
    return int(environ["SLURM_NODEID"])


def node_address(node_name: str | None) -> str | None:
    """The node's `NodeAddr` in Slurm (what the other nodes reach it at), or None."""
    if not node_name:
        return None
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", "-o", node_name],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for word in out.split():
        if word.startswith("NodeAddr="):
            return word.split("=", 1)[1] or None
    return None


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


def run_node(job_id: str, attempt: int, environ: dict[str, str]) -> int:
    signal.signal(signal.SIGTERM, request_shutdown)
    context = WorkerContext()
    settings = context.settings
    node_name = environ.get("SLURMD_NODENAME") or socket.gethostname()
    if "LAUNCHBAY_WORKER_HOST" not in environ:
        address = node_address(node_name)
        if address:
            settings = settings.model_copy(update={"worker_host": address})
            context = WorkerContext(settings)
    services = context.services()
    ref = AttemptRef(job_id, attempt, node_of_allocation(environ))
    worker_name = f"slurm-{environ.get('SLURM_JOB_ID', '?')}:{node_name}"
    if ref.node is not None and ref.node > 0:
        if not wait_for_first_node(services, ref, settings.rendezvous_timeout_s):
            log.warning("%s: the allocation's first node never joined; not started", ref)
            return 0
    taken = take_attempt(services, ref, worker_name=worker_name)
    if taken is None:
        return 0
    result = run_taken(services, taken, leave_shutdown=True)
    if shutdown_requested():
        return 143
    # Slurm's record says what sacct users expect: a job that failed failed; one cancelled
    # through Launchbay (stopped by its supervisor before any scancel) ended as asked.
    ended = result.outcome.state if result.outcome is not None else None
    return 0 if ended in (JobState.SUCCEEDED, JobState.CANCELLED) else 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m worker.slurm_node", description=__doc__)
    parser.add_argument("job_id")
    parser.add_argument("attempt", type=int)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    sys.exit(run_node(args.job_id, args.attempt, dict(os.environ)))


if __name__ == "__main__":
    main()
