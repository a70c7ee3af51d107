"""A pass's admission rounds (`service.scheduling.dispatch_pass.admit_in_rounds`), with the real
planner and an admission that refuses what the test says: a job that admission refuses does
not keep the workers it was given from the jobs behind it."""

from datetime import UTC, datetime
from typing import Any

from service.scheduling.dispatch_pass import Admitted, Planned, Snapshot, admit_in_rounds, plan_pass
from service.scheduling.planner import OwnerLimits, Plan, QueuedJob, WorkerCapacity
from service.scheduling.policies import Policies
from service.scheduling.waiting import WaitingRow
from service.settings import Settings

NOW = datetime(2026, 11, 28, tzinfo=UTC)


def snapshot(jobs: list[QueuedJob], workers: int, max_devices: int | None = None) -> Snapshot:
    capacity = [WorkerCapacity(f"w{i}", frozenset({"default"}), ("cpu:0",)) for i in range(workers)]
    return Snapshot(
        workers=capacity,
        reserved_jobs={},
        stale=[],
        lost={},
        held=[],
        waiting=[WaitingRow(j, None, None) for j in jobs],
        usage={},
        policies=Policies(by_owner={"a": OwnerLimits(max_devices=max_devices)}),
    )


def job(name: str, at: float, owner: str = "a") -> QueuedJob:
    return QueuedJob(name, 1, owner, "default", 0, 1, 1, at)


def rounds(
    seen: Snapshot, refuse: set[str], rounds: int = 3
) -> tuple[list[Admitted], Plan, list[list[str]]]:
    settings = Settings()
    given: list[list[str]] = []

    def admit(planned: Planned) -> list[tuple[QueuedJob, dict[str, Any]]]:
        given.append([j.id for j, _ in planned])
        return [(j, {}) for j, _ in planned if j.id not in refuse]

    def replan(refused: set[str], admitted: list[Admitted]) -> Plan:
        return plan_pass(seen, settings, NOW, refused, admitted)

    admitted, plan = admit_in_rounds(plan_pass(seen, settings, NOW), admit, replan, rounds)
    return admitted, plan, given


def test_the_workers_of_a_refused_job_go_to_the_jobs_behind_it_in_the_same_pass() -> None:
    jobs = [job("stuck", 1), job("next", 2), job("then", 3), job("last", 4)]
    admitted, plan, given = rounds(snapshot(jobs, workers=2), refuse={"stuck"})
    assert given == [["stuck", "next"], ["then"]]
    assert [(j.id, [p.worker for p in places]) for j, _, places in admitted] == [
        ("next", ["w1"]),
        ("then", ["w0"]),
    ]
    # The last plan: who waits (the refused job is shown again by the next pass).
    assert [j.id for j, _ in plan.waiting] == ["last"]


def test_a_later_round_counts_what_the_earlier_ones_admitted() -> None:
    """The owner's quota (2 devices) holds across rounds: after `stuck` is refused, one more
    of its jobs fits, not two."""
    jobs = [job("stuck", 1), job("a1", 2), job("a2", 3), job("a3", 4)]
    seen = snapshot(jobs, workers=4, max_devices=2)
    admitted, plan, given = rounds(seen, refuse={"stuck"})
    assert given == [["stuck", "a1"], ["a2"]]
    assert [j.id for j, _, _ in admitted] == ["a1", "a2"]
    assert [(j.id, r) for j, r in plan.waiting] == [
        ("a3", "owner quota: 2 of 2 devices in use (this job needs 1)")
    ]
    assert seen.usage == {}  # each round counts on a copy


def test_rounds_are_bounded() -> None:
    jobs = [job(f"j{i}", i) for i in range(6)]
    admitted, _, given = rounds(snapshot(jobs, workers=1), refuse={j.id for j in jobs})
    assert admitted == [] and given == [["j0"], ["j1"], ["j2"]]
