"""One dispatch pass's data and decision: what it read (`Snapshot`), the planner's decision
on that (`plan_pass`), its admission rounds (`admit_in_rounds`), and what it did
(`PassReport`). The pass itself is `dispatcher.Dispatcher.run_pass`."""

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from service.scheduling.capacity import ActiveReservation
from service.scheduling.planner import (
    InUse,
    OwnerUsage,
    Placement,
    Plan,
    QueuedJob,
    WorkerCapacity,
    plan_dispatch,
)
from service.scheduling.policies import Policies
from service.scheduling.preemption import PREEMPTED_MESSAGE
from service.scheduling.reservations import LostAdmissions, ReservedJob, running_jobs
from service.scheduling.waiting import WaitingRow
from service.settings import Settings

# Admission rounds of one pass at most (`admit_in_rounds`).
ADMISSION_ROUNDS = 3

Planned = list[tuple[QueuedJob, list[Placement]]]
# A job reserved by this pass: at the attempt reserved, with its spec and placements.
Admitted = tuple[QueuedJob, dict[str, Any], list[Placement]]


def admit_in_rounds(
    plan: Plan,
    admit: Callable[[Planned], list[tuple[QueuedJob, dict[str, Any]]]],
    replan: Callable[[set[str], list[Admitted]], Plan],
    rounds: int = ADMISSION_ROUNDS,
) -> tuple[list[Admitted], Plan]:
    """Admit what `plan` admits. A job that admission refuses (it left the queue or changed
    since it was read) must not keep the workers it was given from the jobs behind it: plan
    again without it (`replan(refused ids, admitted so far)`) and admit that, up to `rounds`
    times. Returns what was admitted, and the last plan (who waits, whom to preempt)."""
    admitted: list[Admitted] = []
    refused: set[str] = set()
    for count in range(1, rounds + 1):
        places = {job.id: p for job, p in plan.admitted}
        taken = admit(plan.admitted)
        admitted += [(job, spec, places[job.id]) for job, spec in taken]
        refused |= places.keys() - {job.id for job, _ in taken}
        if len(taken) == len(places) or count == rounds:
            break
        plan = replan(refused, admitted)
    return admitted, plan


@dataclass
class PassReport:
    admitted: list[str] = field(default_factory=list)
    waiting: int = 0
    released: int = 0
    preempted: list[str] = field(default_factory=list)
    # Waiting jobs whose position or reason this pass wrote.
    shown: int = 0
    # Seconds the decision itself took (reading excluded): the planner.
    decision_s: float = 0.0


@dataclass(frozen=True)
class Snapshot:
    workers: list[WorkerCapacity]
    reserved_jobs: dict[str, ReservedJob]
    stale: list[ActiveReservation]
    # Those of `stale` that were admitted but not taken before their worker went away.
    lost: LostAdmissions
    held: list[ActiveReservation]
    waiting: list[WaitingRow]
    usage: dict[str, OwnerUsage]
    policies: Policies
    # The nodes of started attempts whose worker went away before they joined
    # (`unjoined_nodes.unjoined_lost_nodes`): not the planner's; the dispatcher ends them.
    unjoined: list[ActiveReservation] = field(default_factory=list)


def plan_pass(
    seen: Snapshot,
    settings: Settings,
    now: datetime,
    skip: Collection[str] = (),
    admitted: Sequence[Admitted] = (),
) -> Plan:
    """The planner's decision on `seen`: without the jobs `skip`, and with those `admitted`
    by this pass already holding their devices (a later admission round)."""
    usage = {o: OwnerUsage(u.held_devices, u.decayed_s, u.period_s) for o, u in seen.usage.items()}
    in_use = [InUse(r.worker, r.devices) for r in seen.held]
    for job, _, places in admitted:
        usage.setdefault(job.owner, OwnerUsage()).held_devices += job.devices
        in_use += [InUse(p.worker, p.devices) for p in places]
    left = set(skip) | {job.id for job, _, _ in admitted}
    return plan_dispatch(
        [w.job for w in seen.waiting if w.job.id not in left],
        seen.workers,
        in_use,
        usage,
        seen.policies.by_owner,
        default_limits=seen.policies.default,
        now=now.timestamp(),
        starvation_after_s=settings.starvation_after_s,
        quota_period_s=settings.quota_period_s,
        running=running_jobs(seen.held, seen.reserved_jobs, PREEMPTED_MESSAGE),
        preemption=settings.preemption,
    )
