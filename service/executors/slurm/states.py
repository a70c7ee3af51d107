"""Slurm's job states, mapped onto Launchbay's (docs/slurm.md, "Lifecycle").

While Slurm still holds or runs the allocation its task is live: `PENDING` leaves the job
`queued` with Slurm's reason as its pending reason; from `RUNNING` on, the supervisor inside
the allocation moves the job itself, as an RQ worker does. When the allocation ends, the
supervisor has normally recorded the outcome already; when it could not (Slurm stopped it, or
the node died), the end below is what the reaper records (`service.reaper.reap_ended_tasks`).
"""

from jobs.states import ExitReason, JobState
from service.executors.base import TaskEnd

# Slurm will still run the allocation, or runs it: the Launchbay side is someone's business.
LIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
    }
)


def slurm_end(slurm_state: str, slurm_job_id: str, reason: str | None = None) -> TaskEnd | None:
    """The end an ended allocation means; None while it is live.

    COMPLETED and FAILED mean the supervisor ran and ended: if it recorded nothing (it was
    killed, or never reached the database), the attempt's worker was lost.
    """
    state = slurm_state.split()[0].rstrip("+").upper() if slurm_state.strip() else ""
    if state in LIVE_STATES:
        return None
    said = f"Slurm job {slurm_job_id} ended {state}" + (
        f" ({reason})" if reason and reason != "None" else ""
    )
    if state in ("CANCELLED",):
        return TaskEnd(JobState.CANCELLED, ExitReason.CANCELLED, f"{said}: cancelled in Slurm")
    if state in ("TIMEOUT", "DEADLINE"):
        return TaskEnd(JobState.FAILED, ExitReason.TIMEOUT, f"{said}: its time limit was hit")
    if state == "OUT_OF_MEMORY":
        return TaskEnd(JobState.FAILED, ExitReason.OOM, f"{said}: out of memory")
    if state == "PREEMPTED":
        return TaskEnd(JobState.FAILED, ExitReason.PREEMPTED, f"{said}: preempted; queued again")
    if state in ("NODE_FAIL", "BOOT_FAIL"):
        return TaskEnd(JobState.FAILED, ExitReason.WORKER_LOST, f"{said}: a node failed")
    # COMPLETED, FAILED, and anything newer than this list.
    return TaskEnd(
        JobState.FAILED,
        ExitReason.WORKER_LOST,
        f"{said} without the supervisor recording how the job ended",
    )
