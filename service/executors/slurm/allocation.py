"""What a Slurm allocation tells the supervisor on one of its nodes (`worker.node`, started
by `srun` from the sbatch script): which node of the attempt it is, the name the job shows
for it, and the address the other nodes reach it at."""

import socket
import subprocess
from collections.abc import Mapping

from service.executors.base import NodePlacement


def node_of_allocation(environ: Mapping[str, str]) -> int | None:
    """This node's number in the attempt: `SLURM_NODEID` of `SLURM_JOB_NUM_NODES`; None for
    a single-node allocation (a single-node job has no node number, as on RQ)."""
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


def slurm_placement(environ: Mapping[str, str]) -> NodePlacement:
    node_name = environ.get("SLURMD_NODENAME") or socket.gethostname()
    return NodePlacement(
        node=node_of_allocation(environ),
        worker_name=f"slurm-{environ.get('SLURM_JOB_ID', '?')}:{node_name}",
        address=lambda: node_address(node_name),
    )
