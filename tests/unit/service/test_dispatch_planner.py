"""The dispatcher's decisions (`service.scheduling.planner`), without I/O."""

from service.scheduling.planner import (
    InUse,
    OwnerLimits,
    OwnerUsage,
    QueuedJob,
    RunningJob,
    WorkerCapacity,
    plan_dispatch,
)


def worker(
    name: str, devices: int = 1, queues: tuple[str, ...] = ("default",), lanes: int = 1
) -> WorkerCapacity:
    names = tuple(f"{name}-{k}" for k in range(lanes)) if lanes > 1 else ()
    return WorkerCapacity(name, frozenset(queues), tuple(f"cpu:{i}" for i in range(devices)), names)


def job(
    id: str,
    owner: str = "a",
    *,
    at: float = 0.0,
    priority: int = 0,
    nnodes: int = 1,
    nproc: int = 1,
    queue: str = "default",
) -> QueuedJob:
    return QueuedJob(id, 1, owner, queue, priority, nnodes, nproc, at)


def plan(jobs, workers, busy=(), usage=None, limits=None, **kw):  # type: ignore[no-untyped-def]
    """`busy`: workers whose one lane runs a job on all their devices."""
    in_use = kw.pop("in_use", [InUse(w.name, w.devices) for w in workers if w.name in busy])
    return plan_dispatch(
        jobs,
        workers,
        in_use,
        usage or {},
        limits or {},
        now=kw.pop("now", 1000.0),
        starvation_after_s=kw.pop("starvation_after_s", 600.0),
        quota_period_s=86400.0,
        **kw,
    )


def admitted_ids(p) -> list[str]:  # type: ignore[no-untyped-def]
    return [j.id for j, _ in p.admitted]


def test_priority_first_then_age() -> None:
    jobs = [job("old", at=1), job("new-high", at=5, priority=5), job("newer", at=6)]
    p = plan(jobs, [worker("w1")])
    assert admitted_ids(p) == ["new-high"]
    assert [(j.id, r) for j, r in p.waiting][0][0] == "old"
    assert p.waiting[0][1].startswith("waiting for 1 node(s) with 1 free device(s)")


def test_owners_take_turns_by_devices_held_then_recent_usage() -> None:
    jobs = [job(f"a{i}", "a", at=i) for i in range(10)] + [job("b0", "b", at=50)]
    usage = {"a": OwnerUsage(held_devices=2, decayed_s=100.0)}
    p = plan(jobs, [worker("w1"), worker("w2"), worker("w3")], busy={"w1", "w2"}, usage=usage)
    assert admitted_ids(p) == ["b0"]
    # Equal holdings: less recent usage first.
    usage = {"a": OwnerUsage(decayed_s=100.0), "b": OwnerUsage(decayed_s=5.0)}
    p = plan([job("a0", "a"), job("b0", "b", at=9)], [worker("w1")], usage=usage)
    assert admitted_ids(p) == ["b0"]


def test_weights_divide_the_share() -> None:
    jobs = [job(f"a{i}", "a", at=i) for i in range(6)] + [job(f"b{i}", "b", at=i) for i in range(6)]
    p = plan(jobs, [worker(f"w{i}") for i in range(6)], limits={"a": OwnerLimits(weight=2.0)})
    owners = [j.owner for j, _ in p.admitted]
    assert owners.count("a") == 4 and owners.count("b") == 2


def test_gang_all_nodes_or_none() -> None:
    two = job("two", nnodes=2)
    p = plan([two], [worker("w1"), worker("w2")], busy={"w2"})
    assert p.admitted == []
    assert "waiting for 2 node(s)" in p.waiting[0][1]
    p = plan([two], [worker("w1"), worker("w2")])
    [(_, placements)] = p.admitted
    assert sorted(pl.worker for pl in placements) == ["w1", "w2"]
    assert [pl.node for pl in placements] == [0, 1]


def test_smallest_fitting_worker_and_own_devices() -> None:
    p = plan([job("small", nproc=2)], [worker("big", 8), worker("mid", 2)])
    [(_, [placement])] = p.admitted
    assert placement.worker == "mid" and placement.devices == ("cpu:0", "cpu:1")


def test_quota_waits_without_blocking_others() -> None:
    limits = {"a": OwnerLimits(max_devices=2)}
    usage = {"a": OwnerUsage(held_devices=2)}
    p = plan([job("a1", "a"), job("b1", "b", at=1)], [worker("w1")], usage=usage, limits=limits)
    assert admitted_ids(p) == ["b1"]
    assert p.waiting == [(job("a1", "a"), "owner quota: 2 of 2 devices in use (this job needs 1)")]
    hours = {"a": OwnerLimits(max_device_hours=1.0)}
    p = plan([job("a1", "a")], [worker("w1")], usage={"a": OwnerUsage(period_s=3600)}, limits=hours)
    assert p.waiting[0][1].startswith("owner quota: 1.00 of 1 device-hours used")


def test_lower_priority_says_what_is_ahead() -> None:
    p = plan(
        [job("hi", priority=3, nproc=4), job("lo", at=1, nproc=4)], [worker("w1", 4)], busy={"w1"}
    )
    assert p.waiting[1][1].startswith("behind 1 job(s) of higher priority")


def test_no_worker_and_never_fits_reasons() -> None:
    p = plan([job("x", queue="gpu")], [worker("w1")])
    assert p.waiting[0][1] == "no worker serves queue 'gpu'"
    p = plan([job("x", nproc=4)], [worker("w1", 2)])
    assert p.waiting[0][1].startswith("no worker set fits")


def test_a_long_waiting_big_job_gets_workers_held() -> None:
    big = job("big", nnodes=2, at=0)
    small = job("small", at=900)
    workers = [worker("w1"), worker("w2"), worker("w3")]
    # Not starving yet: the small job backfills the free worker.
    p = plan([big, small], workers, busy={"w1", "w2"}, now=100)
    assert admitted_ids(p) == ["small"]
    # Starving: the free worker is held for it, the small job waits for another.
    p = plan([big, small], workers, busy={"w1", "w2"}, now=1000)
    assert admitted_ids(p) == []
    assert "held for job big" in dict((j.id, r) for j, r in p.waiting)["small"]
    # Backfill still uses workers the big job cannot use.
    elsewhere = job("elsewhere", at=900, queue="other")
    workers = [*workers, worker("other", queues=("other",))]
    p = plan([big, small, elsewhere], workers, busy={"w1", "w2"}, now=1000)
    assert admitted_ids(p) == ["elsewhere"]
    assert set(p.held_for) == {"w2", "w3"} or set(p.held_for) == {"w1", "w3"}


def test_preemption_picks_lower_priority_victims() -> None:
    running = [
        RunningJob("low", 1, "a", 0, ("w1",), (1,)),
        RunningJob("same", 1, "a", 5, ("w2",), (1,)),
    ]
    p = plan(
        [job("urgent", priority=5)],
        [worker("w1"), worker("w2")],
        busy={"w1", "w2"},
        running=running,
        preemption=True,
    )
    assert [(v.id, for_job) for v, for_job in p.preempt] == [("low", "urgent")]
    # Already stopping: not asked twice.
    stopping = [RunningJob("low", 1, "a", 0, ("w1",), (1,), stopping=True)]
    p = plan(
        [job("urgent", priority=5)], [worker("w1")], busy={"w1"}, running=stopping, preemption=True
    )
    assert p.preempt == []
    p = plan([job("urgent", priority=5)], [worker("w1")], busy={"w1"}, running=running)
    assert p.preempt == []


def test_a_pool_packs_jobs_of_different_sizes_on_its_own_devices() -> None:
    pool = worker("host/p", devices=4, lanes=3)
    jobs = [job("two", nproc=2, at=0), job("one-a", at=1), job("one-b", at=2), job("one-c", at=3)]
    p = plan(jobs, [pool], in_use=[])
    placed = {j.id: ps[0] for j, ps in p.admitted}
    assert sorted(placed) == ["one-a", "one-b", "two"]
    devices = [d for pl in placed.values() for d in pl.devices]
    assert sorted(devices) == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    assert len({pl.worker for pl in placed.values()}) == 3
    # No lane left for the fourth, although a device would be.
    assert p.waiting[0][0].id == "one-c"
    # A 2-device job waits while only one device is free, though a lane is.
    in_use = [InUse("host/p-0", ("cpu:0", "cpu:1")), InUse("host/p-1", ("cpu:2",))]
    p = plan([job("two", nproc=2)], [pool], in_use=in_use)
    assert p.admitted == []
    p = plan([job("one", nproc=1)], [pool], in_use=in_use)
    assert [pl.devices for _, pls in p.admitted for pl in pls] == [("cpu:3",)]
