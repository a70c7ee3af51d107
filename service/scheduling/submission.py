"""What the scheduler refuses at submission: a `priority` above the owner's limit (for a
non-admin), and a job that could never fit: more devices than the
owner's quota allows at once, or more than the live workers of its queue have."""

import logging
from collections.abc import Sequence

from sqlmodel import Session

from jobs.spec import JobSpec
from service.auth import Principal
from service.errors import Unprocessable
from service.scheduling.capacity import capacity_of
from service.scheduling.policies import load_policies
from service.settings import Settings
from service.worker_records import typed_worker_records

log = logging.getLogger("launchbay.api")


def check_schedulable(
    session: Session,
    stored: Sequence[bytes | str] | None,
    spec: JobSpec,
    principal: Principal,
    settings: Settings,
) -> None:
    """Raises `Unprocessable` for what the scheduler refuses; `stored`: the workers' records as
    `service.worker_records.stored_worker_records` read them (None: Redis did not answer)."""
    policies = load_policies(session.connection())
    if not principal.is_admin:
        highest = policies.max_priority_of(principal.name, settings.max_user_priority)
        if spec.priority > highest:
            raise Unprocessable(
                f"the job spec goes beyond this service's policy (priority: at most {highest})",
                code="policy_violation",
                detail=[
                    {"loc": ["body", "priority"], "msg": f"at most {highest}", "type": "policy"}
                ],
            )
    devices = spec.nnodes * spec.nproc_per_node
    quota = policies.limits_of(principal.name).max_devices
    if quota is not None and devices > quota:
        raise Unprocessable(
            f"this job needs {devices} devices at once; the owner's quota allows {quota}",
            code="never_fits",
            detail={"devices": devices, "max_devices": quota},
        )
    if stored is None:
        return  # workers unknown: the job is queued
    workers = [w for w in capacity_of(typed_worker_records(stored)) if spec.queue in w.queues]
    # No worker on the queue yet: it may come; the job waits with a reason.
    fitting = [w for w in workers if len(w.devices) >= spec.nproc_per_node]
    if workers and len(fitting) < spec.nnodes:
        largest = max(len(w.devices) for w in workers)
        raise Unprocessable(
            f"this job can never fit queue '{spec.queue}': it needs {spec.nnodes} worker(s) "
            f"with {spec.nproc_per_node} device(s); the queue's {len(workers)} worker(s) "
            f"have at most {largest}, {len(fitting)} of them enough",
            code="never_fits",
            detail={
                "queue": spec.queue,
                "nnodes": spec.nnodes,
                "nproc_per_node": spec.nproc_per_node,
                "workers": len(workers),
                "fitting_workers": len(fitting),
            },
        )
