"""What to admit now, and why every other queued job waits: a pure function of the queue, the
workers' capacity, what is reserved and the owners' usage and limits (docs/scheduling.md).

Order: higher `priority` first; between owners at the same priority, the one holding the
smaller weighted share of devices now, then the one with less recent usage (decayed
device-seconds over its weight), then the older job. A job is admitted only when all its
nodes fit at once, each on a free worker of its queue with at least `nproc_per_node`
devices (the smallest such workers first, so large ones stay free for large jobs). A job
over its owner's quota waits and blocks nobody else. A job that has waited longer than
`starvation_after_s` gets workers held for it, which later jobs may not take (backfill uses
the others).
"""

import heapq
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class WorkerCapacity:
    """A pool of devices as the dispatcher sees it: the devices of one worker, or those that
    the workers of one pool (`launchbay worker --pool`) share, each worker (a lane) running
    one job at a time on the devices reserved for it."""

    name: str
    queues: frozenset[str]
    devices: tuple[str, ...]
    # The workers that run its jobs (a worker alone is its own one lane).
    lanes: tuple[str, ...] = ()

    def lane_names(self) -> tuple[str, ...]:
        return self.lanes or (self.name,)


@dataclass(frozen=True)
class QueuedJob:
    id: str
    attempt: int
    owner: str
    queue: str
    priority: int
    nnodes: int
    nproc_per_node: int
    # Unix seconds since it has been waiting (its creation).
    queued_at: float

    @property
    def devices(self) -> int:
        return self.nnodes * self.nproc_per_node


@dataclass(frozen=True)
class RunningJob:
    """A job holding reservations: its workers, for preemption."""

    id: str
    attempt: int
    owner: str
    priority: int
    # The worker (lane) of each node, and how many devices each holds.
    workers: tuple[str, ...]
    node_devices: tuple[int, ...]
    # Already asked to stop for another job (preempted, not yet gone).
    stopping: bool = False

    @property
    def devices(self) -> int:
        return sum(self.node_devices)

    def per_worker_devices(self) -> tuple[int, ...]:
        return self.node_devices


@dataclass(frozen=True)
class OwnerLimits:
    weight: float = 1.0
    max_devices: int | None = None
    max_device_hours: float | None = None


@dataclass
class OwnerUsage:
    held_devices: int = 0
    # Device-seconds, decayed with the half-life: the fair-share usage.
    decayed_s: float = 0.0
    # Device-seconds in the quota period.
    period_s: float = 0.0


@dataclass(frozen=True)
class Placement:
    node: int
    worker: str
    devices: tuple[str, ...]


@dataclass
class Plan:
    admitted: list[tuple[QueuedJob, list[Placement]]] = field(default_factory=list)
    # Every queued job not admitted, in the order the queue will run, with why it waits.
    waiting: list[tuple[QueuedJob, str]] = field(default_factory=list)
    # Running jobs to stop so that a job of higher priority fits: (victim, for job id).
    preempt: list[tuple[RunningJob, str]] = field(default_factory=list)
    # Workers kept free for a long-waiting job: {worker: job id}.
    held_for: dict[str, str] = field(default_factory=dict)


# How many long-waiting jobs get pools held for them in one pass.
MAX_HELD_JOBS = 4


@dataclass(frozen=True)
class InUse:
    """Devices reserved on a lane (worker) of a pool."""

    worker: str
    devices: tuple[str, ...]


@dataclass
class _Pool:
    capacity: WorkerCapacity
    free_devices: list[str]
    free_lanes: list[str]

    def fits(self, job: "QueuedJob") -> bool:
        """Could ever run one node of `job`."""
        return (
            job.queue in self.capacity.queues and len(self.capacity.devices) >= job.nproc_per_node
        )

    def free_for(self, job: "QueuedJob") -> bool:
        return bool(self.free_lanes) and len(self.free_devices) >= job.nproc_per_node


@dataclass
class _Pass:
    pools: list[_Pool]
    usage: dict[str, OwnerUsage]
    limits: Mapping[str, OwnerLimits]
    default_limits: OwnerLimits
    now: float
    starvation_after_s: float
    quota_period_s: float
    running: Sequence[RunningJob] = ()
    preemption: bool = False
    plan: Plan = field(default_factory=Plan)
    # (queue, nproc, nnodes) that found no room this pass: the reason, reused.
    no_room: dict[tuple[str, int, int], str] = field(default_factory=dict)
    blocked_above: int = 0
    preempted: set[str] = field(default_factory=set)
    held_jobs: int = 0
    # (queue, nproc, nnodes, priority) that no preemption could make room for this pass.
    no_victims: set[tuple[str, int, int, int]] = field(default_factory=set)
    pool_of_lane: dict[str, str] = field(default_factory=dict)

    def limits_of(self, owner: str) -> OwnerLimits:
        return self.limits.get(owner, self.default_limits)


def make_pools(workers: Sequence[WorkerCapacity], in_use: Iterable[InUse]) -> list[_Pool]:
    """Each pool's free devices and lanes, smallest pools first (best fit)."""
    used: dict[str, set[str]] = defaultdict(set)
    busy: set[str] = set()
    for reserved in in_use:
        busy.add(reserved.worker)
        used[reserved.worker].update(reserved.devices)
    pools = []
    for worker in sorted(workers, key=lambda w: (len(w.devices), w.name)):
        lanes = worker.lane_names()
        taken = set().union(*(used.get(lane, set()) for lane in lanes))
        pools.append(
            _Pool(
                worker,
                [d for d in worker.devices if d not in taken],
                [lane for lane in lanes if lane not in busy],
            )
        )
    return pools


def plan_dispatch(
    jobs: Iterable[QueuedJob],
    workers: Sequence[WorkerCapacity],
    in_use: Iterable[InUse],
    usage: Mapping[str, OwnerUsage],
    limits: Mapping[str, OwnerLimits],
    *,
    default_limits: OwnerLimits = OwnerLimits(),
    now: float,
    starvation_after_s: float,
    quota_period_s: float,
    running: Sequence[RunningJob] = (),
    preemption: bool = False,
) -> Plan:
    """The admissions of one dispatch pass (see the module docstring)."""
    state = _Pass(
        pools=make_pools(workers, in_use),
        usage={o: OwnerUsage(u.held_devices, u.decayed_s, u.period_s) for o, u in usage.items()},
        limits=limits,
        default_limits=default_limits,
        now=now,
        starvation_after_s=starvation_after_s,
        quota_period_s=quota_period_s,
        running=running,
        preemption=preemption,
    )
    state.pool_of_lane = {
        lane: pool.capacity.name for pool in state.pools for lane in pool.capacity.lane_names()
    }
    by_priority: dict[int, list[QueuedJob]] = defaultdict(list)
    for job in jobs:
        by_priority[job.priority].append(job)
    for priority in sorted(by_priority, reverse=True):
        state.blocked_above += _plan_level(state, by_priority[priority])
    return state.plan


def _share_key(state: _Pass, owner: str, head: QueuedJob) -> tuple[float, float, float, str]:
    weight = max(state.limits_of(owner).weight, 1e-9)
    usage = state.usage.setdefault(owner, OwnerUsage())
    return (usage.held_devices / weight, usage.decayed_s / weight, head.queued_at, head.id)


def _plan_level(state: _Pass, jobs: list[QueuedJob]) -> int:
    """Admit what fits of one priority, owners taking turns by fair share; returns how many
    of its jobs wait for devices."""
    per_owner: dict[str, deque[QueuedJob]] = defaultdict(deque)
    for job in sorted(jobs, key=lambda j: (j.queued_at, j.id)):
        per_owner[job.owner].append(job)
    heap = [(_share_key(state, owner, q[0]), owner) for owner, q in per_owner.items()]
    heapq.heapify(heap)
    blocked = 0
    while heap:
        _, owner = heapq.heappop(heap)
        queue = per_owner[owner]
        job = queue.popleft()
        reason = _decide(state, job)
        if reason is not None:
            state.plan.waiting.append((job, reason))
            if not reason.startswith("owner quota"):
                blocked += 1
        if queue:
            heapq.heappush(heap, (_share_key(state, owner, queue[0]), owner))
    return blocked


def _decide(state: _Pass, job: QueuedJob) -> str | None:
    """Admit `job` (None) or say why it waits."""
    usage = state.usage.setdefault(job.owner, OwnerUsage())
    limits = state.limits_of(job.owner)
    if limits.max_devices is not None and usage.held_devices + job.devices > limits.max_devices:
        return (
            f"owner quota: {usage.held_devices} of {limits.max_devices} devices in use "
            f"(this job needs {job.devices})"
        )
    if limits.max_device_hours is not None and usage.period_s >= limits.max_device_hours * 3600:
        return (
            f"owner quota: {usage.period_s / 3600:.2f} of {limits.max_device_hours:g} "
            f"device-hours used in the last {state.quota_period_s / 3600:g} h"
        )
    key = (job.queue, job.nproc_per_node, job.nnodes)
    reason = state.no_room.get(key)
    if reason is None:
        placements = _place(state, job)
        if placements is not None:
            state.plan.admitted.append((job, placements))
            usage.held_devices += job.devices
            return None
        reason = _why_no_room(state, job)
        state.no_room[key] = reason
    _hold_if_starving(state, job)
    if state.preemption:
        _preempt_for(state, job)
    if state.blocked_above and not reason.startswith("no worker"):
        return f"behind {state.blocked_above} job(s) of higher priority; {reason}"
    return reason


def _held_for_other(state: _Pass, pool: str, job_id: str) -> bool:
    holder = state.plan.held_for.get(pool)
    return holder is not None and holder != job_id


def _place(state: _Pass, job: QueuedJob) -> list[Placement] | None:
    """One node per pool, on the pools with the fewest free devices that fit (packing)."""
    chosen: list[_Pool] = []
    candidates = [
        p
        for p in state.pools
        if p.fits(job) and p.free_for(job) and not _held_for_other(state, p.capacity.name, job.id)
    ]
    candidates.sort(key=lambda p: len(p.free_devices))
    chosen = candidates[: job.nnodes]
    if len(chosen) < job.nnodes:
        return None
    placements = []
    for node, pool in enumerate(chosen):
        devices = tuple(pool.free_devices[: job.nproc_per_node])
        del pool.free_devices[: job.nproc_per_node]
        placements.append(Placement(node, pool.free_lanes.pop(0), devices))
    return placements


def _why_no_room(state: _Pass, job: QueuedJob) -> str:
    serving = [p for p in state.pools if job.queue in p.capacity.queues]
    if not serving:
        return f"no worker serves queue '{job.queue}'"
    big = [p for p in serving if p.fits(job)]
    if len(big) < job.nnodes:
        return (
            f"no worker set fits: needs {job.nnodes} worker(s) with {job.nproc_per_node} "
            f"device(s) on queue '{job.queue}', {len(big)} live"
        )
    free = [p for p in big if p.free_for(job)]
    held = [p for p in free if _held_for_other(state, p.capacity.name, job.id)]
    text = (
        f"waiting for {job.nnodes} node(s) with {job.nproc_per_node} free device(s) on queue "
        f"'{job.queue}' ({len(free) - len(held)} free now)"
    )
    if held:
        holder = state.plan.held_for[held[0].capacity.name]
        text += f"; {len(held)} held for job {holder}, waiting longest"
    return text


def _hold_if_starving(state: _Pass, job: QueuedJob) -> None:
    """Keep pools for a job that has waited too long: free ones now, busy ones as they free
    up, so that smaller jobs cannot take them first forever. The first `MAX_HELD_JOBS` such
    jobs in the order get them (EASY backfill holds for the first; a few more keep the next
    big jobs from waiting behind an endless stream of small ones)."""
    if state.now - job.queued_at < state.starvation_after_s:
        return
    if state.held_jobs >= MAX_HELD_JOBS or len(state.plan.held_for) >= len(state.pools):
        return
    state.held_jobs += 1
    candidates = [
        p for p in state.pools if p.fits(job) and p.capacity.name not in state.plan.held_for
    ]
    if len(candidates) < job.nnodes:
        return
    candidates.sort(key=lambda p: (-len(p.free_devices), len(p.capacity.devices), p.capacity.name))
    for pool in candidates[: job.nnodes]:
        state.plan.held_for[pool.capacity.name] = job.id


def _preempt_for(state: _Pass, job: QueuedJob) -> None:
    """Choose running jobs of lower priority whose devices, with the free ones, fit `job`."""
    key = (job.queue, job.nproc_per_node, job.nnodes, job.priority)
    if key in state.no_victims:
        return
    room = {
        p.capacity.name: [len(p.free_devices), len(p.free_lanes)]
        for p in state.pools
        if p.fits(job) and not _held_for_other(state, p.capacity.name, job.id)
    }

    def usable() -> int:
        return sum(1 for devices, lanes in room.values() if devices >= job.nproc_per_node and lanes)

    if usable() >= job.nnodes:
        return
    victims: list[RunningJob] = []
    for running in sorted(state.running, key=lambda r: (r.priority, -r.devices)):
        if running.priority >= job.priority or running.id in state.preempted:
            continue
        pools = [state.pool_of_lane.get(w) for w in running.workers]
        if not any(p in room for p in pools):
            continue
        state.preempted.add(running.id)
        if not running.stopping:
            victims.append(running)
        for pool, devices in zip(pools, running.per_worker_devices(), strict=True):
            if pool in room:
                room[pool][0] += devices
                room[pool][1] += 1
        if usable() >= job.nnodes:
            break
    if usable() < job.nnodes:
        state.no_victims.add(key)
        return
    for victim in victims:
        state.plan.preempt.append((victim, job.id))
    for pool, (devices, lanes) in room.items():
        if devices >= job.nproc_per_node and lanes:
            state.plan.held_for.setdefault(pool, job.id)
