"""The executor of the workers' queues: RQ under the dispatcher, which admits every job
(docs/scheduling.md). `submit` of a job no reservation holds yet wakes the dispatcher
instead of enqueueing, and the nodes of an admitted job go each to the RQ queue of the
worker reserved for it (`capacity.dispatch_queue_name`): the hand-over.

This is the dispatcher's one entry from the rest of Launchbay: the API's submit and the
retry of an attempt (`service.executors.base.submit_retry`) call `submit`, the reaper
`describe` and `resubmit`, a cancel `cancel`; the dispatcher itself `hand_over` what it
admitted (`service.scheduling.dispatcher`).
"""

from collections.abc import Sequence

from redis import Redis
from redis.exceptions import RedisError
from rq import Queue
from rq.job import Job as RQJob
from rq.queue import EnqueueData
from sqlalchemy import select
from sqlalchemy.engine import Engine

from jobs.states import JobState
from service.executors.base import ExecutorUnavailable, TaskStatus
from service.executors.rq import RQExecutor, attempt_tasks, prepare_task
from service.models import Job, JobReservation
from service.scheduling.capacity import ActiveReservation, dispatch_queue_name
from service.scheduling.reservations import reservations_of
from service.worker_records import KEY_PREFIX

WAKE_KEY = f"{KEY_PREFIX}:dispatch:wake"


def wake_dispatcher(redis: Redis) -> None:
    """Ask the dispatcher for a pass now (a list of at most one item it blocks on)."""
    with redis.pipeline(transaction=False) as pipe:
        pipe.lpush(WAKE_KEY, 1)
        pipe.ltrim(WAKE_KEY, 0, 0)
        pipe.execute()


# A job's attempt to hand over, and the reservations of its nodes.
Handed = tuple[Job, Sequence[ActiveReservation]]


def hand_over(
    redis: Redis,
    job: Job,
    reservations: Sequence[ActiveReservation],
    *,
    grace_s: float,
    only: Sequence[str] | None = None,
) -> None:
    """Enqueue each node's task of the job's attempt on its reserved worker's own queue."""
    hand_over_all(redis, [(job, reservations)], grace_s=grace_s, only=only)


def hand_over_all(
    redis: Redis,
    handed: Sequence[Handed],
    *,
    grace_s: float,
    only: Sequence[str] | None = None,
) -> None:
    """`hand_over` of every job of `handed`, in one Redis transaction (one round trip): a
    dispatch pass hands over all it admitted at once."""
    by_queue: dict[str, list[EnqueueData]] = {}
    for job, reservations in handed:
        worker_of = {r.node: r.worker for r in reservations}
        for task in attempt_tasks(job):
            if only is not None and task.task_id not in only:
                continue
            worker = worker_of.get(task.node or 0)
            if worker is None:
                continue
            by_queue.setdefault(dispatch_queue_name(worker), []).append(
                prepare_task(job, task, grace_s=grace_s, on=worker)
            )
    if not by_queue:
        return
    with redis.pipeline() as pipe:
        for name, tasks in by_queue.items():
            Queue(name, connection=redis).enqueue_many(tasks, pipeline=pipe)
        pipe.execute()


class DispatchExecutor(RQExecutor):
    """`service.executors.rq.RQExecutor`, with the dispatcher deciding where and when."""

    def __init__(self, redis: Redis, engine: Engine, *, grace_s: float) -> None:
        super().__init__(redis, grace_s=grace_s)
        self.engine = engine

    def _reservations(self, job: Job) -> list[ActiveReservation]:
        with self.engine.connect() as connection:
            return reservations_of(connection, job.id, job.attempt)

    def submit(self, job: Job) -> None:
        """A new attempt is the dispatcher's to admit: wake it. (It hands over what it admits
        itself; the reaper hands over again what was lost: `resubmit`.)"""
        try:
            wake_dispatcher(self.redis)
        except RedisError as exc:
            raise ExecutorUnavailable(f"Redis: {exc}") from exc

    def describe(self, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]:
        """A queued job that no reservation holds is the dispatcher's: its tasks are live."""
        described = super().describe(jobs)
        queued = [j for j in jobs if j.state == JobState.QUEUED]
        if not queued:
            return described
        table = JobReservation.__table__  # type: ignore[attr-defined]
        with self.engine.connect() as connection:
            held = {
                (r.job_id, r.attempt)
                for r in connection.execute(
                    select(table.c.job_id, table.c.attempt).where(
                        table.c.job_id.in_([j.id for j in queued]),
                        table.c.released_at.is_(None),
                    )
                )
            }
        for job in queued:
            if (job.id, job.attempt) not in held:
                described[job.id] = [TaskStatus(t.task_id, True) for t in self.plan(job)]
        return described

    def resubmit(self, job: Job, task_ids: Sequence[str]) -> None:
        reservations = self._reservations(job)
        try:
            if not reservations:
                wake_dispatcher(self.redis)
                return
            for rq_id in task_ids:
                self.redis.delete(RQJob.key_for(rq_id))
            hand_over(self.redis, job, reservations, grace_s=self.grace_s, only=task_ids)
        except RedisError as exc:
            raise ExecutorUnavailable(f"Redis: {exc}") from exc

    def cancel(self, job: Job) -> None:
        """Withdraw the attempt's tasks; its devices are released at the next pass, now."""
        super().cancel(job)
        try:
            wake_dispatcher(self.redis)
        except RedisError as exc:
            raise ExecutorUnavailable(f"Redis: {exc}") from exc
