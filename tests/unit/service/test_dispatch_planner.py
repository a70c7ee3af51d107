"""The dispatcher's decisions (`service.scheduling.planner`), without I/O."""

from service.scheduling.planner import (
    OwnerLimits,
    OwnerUsage,
    QueuedJob,
    RunningJob,
    WorkerCapacity,
    plan_dispatch,
)


def worker(name: str, devices: int = 1, queues: tuple[str, ...] = ("default",)) -> WorkerCapacity:
    return WorkerCapacity(name, frozenset(queues), tuple(f"cpu:{i}" for i in range(devices)))


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
    return plan_dispatch(
        jobs,
        workers,
        busy,
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
    p = plan(
        [big, small],
        [*workers, worker("other", queues=("default",))],
        busy={"w1", "w2", "w3"},
        now=1000,
    )
    assert p.held_for.keys() <= {"w1", "w2", "w3", "other"}


def test_preemption_picks_lower_priority_victims() -> None:
    running = [RunningJob("low", 1, "a", 0, ("w1",), 1), RunningJob("same", 1, "a", 5, ("w2",), 1)]
    p = plan(
        [job("urgent", priority=5)],
        [worker("w1"), worker("w2")],
        busy={"w1", "w2"},
        running=running,
        preemption=True,
    )
    assert [(v.id, for_job) for v, for_job in p.preempt] == [("low", "urgent")]
    # Already stopping: not asked twice.
    stopping = [RunningJob("low", 1, "a", 0, ("w1",), 1, stopping=True)]
    p = plan(
        [job("urgent", priority=5)], [worker("w1")], busy={"w1"}, running=stopping, preemption=True
    )
    assert p.preempt == []
    p = plan([job("urgent", priority=5)], [worker("w1")], busy={"w1"}, running=running)
    assert p.preempt == []
