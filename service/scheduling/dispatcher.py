"""The dispatcher: a thread in every API process; the one holding the lease (`lease`)
dispatches, the others wait to take over. A pass runs when something wakes it (a
submission, the end of any attempt: `service.executors.dispatch.wake_dispatcher`), else every
`dispatch_interval_s`:

1. read the live workers (Redis) and the reservations (`reservations`), queue (`waiting`),
   usage and policies (database);
2. plan (`dispatch_pass.plan_pass`), outside any write transaction;
3. in one transaction checked against the lease's fencing token (`admission.admit`): release
   the reservations whose attempt is over, queue again as its next attempt a job whose worker
   went away before taking it (`readmission`), reserve the devices of every admitted job
   (planning again without a job that admission refused, so that its workers go to the jobs
   behind it: `dispatch_pass.admit_in_rounds`), ask preempted jobs to stop;
4. after the commit, hand every admitted node to its worker, all in one Redis round trip
   (`service.executors.dispatch.hand_over_all`); end the started multi-node attempts whose
   node's worker went away before joining (`unjoined_nodes`); show each waiting job's
   position and reason where it changed: at once when few changed or nothing was admitted,
   else at most once per `dispatch_interval_s` (while jobs stream out of a long queue, every
   pass would otherwise write every waiting row again: `SHOW_AT_ONCE`).

What changes slowly is read again at most once per `dispatch_interval_s`: the owners' recent
usage and the policies; the live workers too, unless the pass was woken (a worker that came
up since must not wait for the interval: then at most `WOKEN_CAPACITY_AGE_S` old).

A dispatcher that dies between 3 and 4 leaves admitted jobs without tasks: the reaper
finds them (`DispatchExecutor.describe`) and hands them over again.
"""

import logging
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import Connection
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from jobs.states import JobState
from service.executors.base import ExecutorUnavailable
from service.executors.dispatch import WAKE_KEY, Handed, hand_over_all
from service.executors.registry import routed_queues
from service.models import Job, utcnow
from service.records import PENDING_REASON_MAX, show_queued
from service.records.lifecycle import transition
from service.scheduling import admission
from service.scheduling.capacity import (
    ActiveReservation,
    active_reservations,
    live_capacity,
    live_lanes,
)
from service.scheduling.dispatch_pass import (
    Admitted,
    PassReport,
    Planned,
    Snapshot,
    admit_in_rounds,
    plan_pass,
)
from service.scheduling.lease import Lease, LeaseLost, new_holder_name, release_lease, take_lease
from service.scheduling.planner import OwnerUsage, Plan, QueuedJob, WorkerCapacity
from service.scheduling.policies import Policies, load_policies
from service.scheduling.preemption import preemption_message
from service.scheduling.reservations import (
    load_reserved_jobs,
    lost_admissions,
    released_spans,
    stale_reservations,
    unfinished_node_workers,
    without_lanes,
)
from service.scheduling.unjoined_nodes import UnjoinedNodes, unjoined_lost_nodes
from service.scheduling.usage import add_spans, usage_since
from service.scheduling.waiting import Shown, load_queue, waiting_changes
from service.settings import Settings
from service.worker_records import workers_generation

log = logging.getLogger("launchbay.dispatcher")

# Position and reason changes a pass that admitted jobs writes at once; more wait for the
# next pass a `dispatch_interval_s` after the last write (or one that admits nothing).
SHOW_AT_ONCE = 64
# How old the live workers read may be for a pass that something woke.
WOKEN_CAPACITY_AGE_S = 0.1


@dataclass
class Dispatcher:
    engine: Engine
    redis: Redis
    settings: Settings
    holder: str = field(default_factory=new_holder_name)
    # The queues another executor owns (Slurm's): their jobs are not the dispatcher's.
    elsewhere: frozenset[str] = field(default_factory=routed_queues)
    lease: Lease | None = None
    renewed_at: float = 0.0
    unjoined: UnjoinedNodes = field(default_factory=UnjoinedNodes)
    # Each queued job as the planner sees it, read once (`waiting.load_queue`).
    known_jobs: dict[str, QueuedJob] = field(default_factory=dict)
    # What each waiting job shows, as this dispatcher last wrote it; None: read it (after a
    # takeover another may have written since).
    shown: Shown | None = None
    # (monotonic time read, `workers_generation` then, the live workers then): `_capacity`.
    capacity: tuple[float, int, list[WorkerCapacity]] | None = None
    # (monotonic time read, owners' recent usage, policies): `_read`.
    history: tuple[float, dict[str, OwnerUsage], Policies, datetime] | None = None
    # Monotonic time of the last positions written (`_show`), and whether the coming pass
    # was woken (`wait_for_wake`).
    shown_at: float = 0.0
    woken: bool = True

    def keep_lease(self) -> Lease | None:
        """Hold (renew, or take over) the lease; None while another process holds it."""
        now = time.monotonic()
        if self.lease is not None and now - self.renewed_at < self.settings.dispatch_lease_s / 3:
            return self.lease
        with self.engine.begin() as connection:
            lease = take_lease(connection, self.holder, self.settings.dispatch_lease_s)
        if lease is not None and (self.lease is None or lease.token != self.lease.token):
            log.info("dispatcher %s leads (fencing token %d)", self.holder, lease.token)
            self.shown = None
        self.lease, self.renewed_at = lease, now
        return lease

    def run_pass(self, lease: Lease) -> PassReport:
        """One pass (see the module docstring); `LeaseLost` when the lease went elsewhere."""
        settings, report = self.settings, PassReport()
        now = utcnow()
        seen = self._read(now)
        started = time.perf_counter()
        plan = plan_pass(seen, settings, now)
        report.decision_s = time.perf_counter() - started

        def replan(refused: set[str], admitted: list[Admitted]) -> Plan:
            return plan_pass(seen, settings, now, refused, admitted)

        with self.engine.begin() as connection:
            requeued = admission.release(connection, seen.stale, seen.reserved_jobs, seen.lost, now)

            def admit(planned: Planned) -> list[tuple[QueuedJob, dict[str, Any]]]:
                return admission.admit(connection, lease, settings.dispatch_lease_s, planned, now)

            admitted, plan = admit_in_rounds(plan, admit, replan)
            report.preempted = self._preempt(connection, plan)
        for (job_id, attempt), gone in seen.lost.items():
            if job_id in requeued:
                log.warning(
                    "job %s attempt %d: worker %s went away before taking it; queued again",
                    job_id,
                    attempt,
                    ", ".join(gone),
                )
        # Handed over before the positions are written: the launch waits for nothing else.
        report.admitted = [job.id for job, _, _ in admitted]
        self._hand_over(admitted)
        self.unjoined.end_lost(self.engine, self.redis, self.settings, seen.unjoined)
        report.shown = self._show(seen, plan, admitted=report.admitted)
        report.released, report.waiting = len(seen.stale), len(plan.waiting)
        return report

    def _show(self, seen: Snapshot, plan: Plan, *, admitted: Sequence[str]) -> int:
        """Write the waiting jobs' positions and reasons that changed (see the module
        docstring for when); returns how many were written."""
        changes = waiting_changes({w.job.id: w for w in seen.waiting}, plan.waiting)
        now = time.monotonic()
        if (
            admitted
            and len(changes) > SHOW_AT_ONCE
            and now - self.shown_at < self.settings.dispatch_interval_s
        ):
            if self.shown is not None:  # the rows keep what they showed; admitted ones none
                for job_id in admitted:
                    self.shown.pop(job_id, None)
            return 0
        with self.engine.begin() as connection:
            show_queued(connection, changes)
        self.shown_at = now
        self.shown = {
            job.id: (position, reason[:PENDING_REASON_MAX])
            for position, (job, reason) in enumerate(plan.waiting, start=1)
        }
        return len(changes)

    def _read(self, now: datetime) -> "Snapshot":
        """What a pass decides on: live workers, reservations (those to release apart), the
        queue, usage and policies."""
        settings = self.settings
        workers = self._capacity()
        with self.engine.connect() as connection:
            reservations = active_reservations(connection)
            jobs = load_reserved_jobs(connection, reservations)
            lanes = live_lanes(workers)
            stale = stale_reservations(reservations, jobs, lanes)
            lost = lost_admissions(stale, jobs, lanes)
            unjoined = unjoined_lost_nodes(connection, reservations, jobs, lanes)
            stale_keys = {(r.job_id, r.attempt, r.node) for r in stale}
            held = [r for r in reservations if (r.job_id, r.attempt, r.node) not in stale_keys]
            waiting = load_queue(
                connection,
                {(r.job_id, r.attempt) for r in held},
                self.known_jobs,
                self.elsewhere,
                self.shown,
            )
            retried = [(w.job.id, w.job.attempt) for w in waiting if w.job.attempt > 1]
            if retried:
                since = now - timedelta(seconds=settings.reaper_lost_after_s)
                gone = unfinished_node_workers(connection, retried, since)
                workers = without_lanes(workers, gone)
            # A lost admission's job is planned as the attempt it becomes this pass (`release`).
            waiting = [
                replace(w, job=replace(w.job, attempt=w.job.attempt + 1))
                if (w.job.id, w.job.attempt) in lost
                else w
                for w in waiting
            ]
            # Read again a pass interval on; in between, what the attempts that ended add to it.
            # Held devices are counted from the reservations below.
            history = self.history
            if history is None or time.monotonic() - history[0] >= settings.dispatch_interval_s:
                usage = usage_since(
                    connection, now, settings.fair_share_half_life_s, settings.quota_period_s
                )
                policies = load_policies(connection)
                history = self.history = (time.monotonic(), usage, policies, now)
            else:  # the owner who just ran comes after the one who did not
                add_spans(
                    history[1],
                    released_spans(stale, jobs, since=history[3], now=now),
                    now=now.timestamp(),
                    half_life_s=settings.fair_share_half_life_s,
                    period_s=settings.quota_period_s,
                )
        _, past, policies, _ = history
        # Recent usage and policies as read at most a pass interval ago; held devices now.
        usage = {owner: OwnerUsage(0, u.decayed_s, u.period_s) for owner, u in past.items()}
        for r in held:
            usage.setdefault(r.owner, OwnerUsage()).held_devices += len(r.devices)
        return Snapshot(workers, jobs, stale, lost, held, waiting, usage, policies, unjoined)

    def _capacity(self) -> list[WorkerCapacity]:
        """The live workers, read at most once per `dispatch_interval_s`; sooner for a woken
        pass if workers came or went since (`workers_generation`), but not within
        `WOKEN_CAPACITY_AGE_S`: passes woken one after another (jobs ending and submitted by
        the hundred) do not each list them again from Redis. A worker gone since is caught by
        its reservation's release (`reservations.stale_reservations`)."""
        now, settings = time.monotonic(), self.settings
        generation = None
        if self.capacity is not None:
            read_at, known, workers = self.capacity
            age = now - read_at
            recent = age < settings.dispatch_interval_s
            if age < WOKEN_CAPACITY_AGE_S or (recent and not self.woken):
                return workers
            if recent:
                generation = workers_generation(self.redis)
                if generation == known:
                    return workers
        if generation is None:  # read before the workers: a change after is seen next pass
            generation = workers_generation(self.redis)
        # Well before its jobs are called lost (see live_capacity).
        silent_for_s = max(2 * settings.heartbeat_interval_s, settings.reaper_lost_after_s / 2)
        workers = live_capacity(self.redis, silent_for_s=silent_for_s)
        self.capacity = (now, generation, workers)
        return workers

    def _preempt(self, connection: Connection, plan: Plan) -> list[str]:
        """Ask each victim to stop through its `cancelling` state (with its state event), and
        a message that tells its worker to record the attempt as `preempted`."""
        stopped = []
        session = Session(bind=connection)
        for victim, for_job in plan.preempt:
            if transition(
                session,
                victim.id,
                JobState.CANCELLING,
                attempt=victim.attempt,
                message=preemption_message(for_job),
            ):
                log.info("job %s preempted for job %s", victim.id, for_job)
                stopped.append(victim.id)
        session.flush()
        return stopped

    def _hand_over(self, admitted: Sequence[Admitted]) -> None:
        handed: list[Handed] = []
        for queued, spec, places in admitted:
            # Every default factory given: pydantic reads a factory's signature at each call.
            job = Job.model_construct(
                id=queued.id, attempt=queued.attempt, spec=spec, queue=queued.queue,
                created_at=utcnow(), warnings=[], latest_metrics={},
            )  # fmt: skip
            reservations = [
                ActiveReservation(
                    queued.id, queued.attempt, p.node, queued.owner, p.worker, p.devices
                )
                for p in places
            ]
            handed.append((job, reservations))
        try:
            hand_over_all(self.redis, handed, grace_s=self.settings.cancel_grace_s)
        except (RedisError, ExecutorUnavailable) as exc:
            # Reserved, without a task: the reaper hands them over again.
            ids = ", ".join(job.id for job, _ in handed)
            log.warning("jobs %s admitted but not handed over yet: %s", ids, exc)

    @property
    def stop_key(self) -> str:
        """A list of this dispatcher's own that its stop pushes to: `wait_for_wake` returns at
        once then (an API process shuts down without waiting out the interval)."""
        return f"{WAKE_KEY}:stop:{self.holder}"

    def wait_for_wake(self, timeout_s: float) -> bool:
        """Block until woken or `timeout_s`; whether something woke it."""
        popped = self.redis.blpop([WAKE_KEY, self.stop_key], timeout=timeout_s)
        self.woken = popped is not None and popped[0] in (WAKE_KEY, WAKE_KEY.encode())
        return self.woken

    def interrupt(self) -> None:
        """End a `wait_for_wake` in progress (for a stop), on a connection of its own: the
        dispatcher's thread may be closing its own meanwhile."""
        redis = Redis.from_url(self.settings.redis_url, socket_timeout=2, socket_connect_timeout=2)
        try:
            with redis.pipeline() as pipe:
                pipe.lpush(self.stop_key, 1)
                pipe.expire(self.stop_key, 60)
                pipe.execute()
        finally:
            redis.close()

    def give_up(self) -> None:
        if self.lease is None:
            return
        try:
            with self.engine.begin() as connection:
                release_lease(connection, self.lease)
        except SQLAlchemyError as exc:
            log.warning("dispatcher lease not given up: %s", exc)
        self.lease = None


class DispatcherThread(threading.Thread):
    """Runs a `Dispatcher` until stopped: passes while it leads, else tries to take over."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        super().__init__(name="launchbay-dispatcher", daemon=True)
        timeout = settings.dispatch_interval_s + 5
        redis = Redis.from_url(settings.redis_url, socket_timeout=timeout, socket_connect_timeout=2)
        self.dispatcher = Dispatcher(engine, redis, settings)
        self.stopping = threading.Event()

    def run(self) -> None:
        dispatcher, settings = self.dispatcher, self.dispatcher.settings
        while not self.stopping.is_set():
            try:
                lease = dispatcher.keep_lease()
                if lease is None:
                    self.stopping.wait(min(1.0, settings.dispatch_lease_s / 3))
                    continue
                report = dispatcher.run_pass(lease)
                if report.admitted or report.preempted:
                    log.info(
                        "admitted %s; preempted %s; %d waiting",
                        report.admitted,
                        report.preempted,
                        report.waiting,
                    )
                dispatcher.wait_for_wake(settings.dispatch_interval_s)
            except LeaseLost as exc:
                log.warning("%s", exc)
                dispatcher.lease = None
            except (SQLAlchemyError, RedisError) as exc:
                log.warning("dispatch pass failed: %s", exc)
                self.stopping.wait(1.0)
        dispatcher.give_up()
        with suppress(RedisError):
            dispatcher.redis.delete(dispatcher.stop_key)
        dispatcher.redis.close()

    def stop(self) -> None:
        self.stopping.set()
        try:
            self.dispatcher.interrupt()
        except RedisError as exc:  # it wakes by itself within an interval
            log.debug("dispatcher not interrupted: %s", exc)
        self.join(timeout=self.dispatcher.settings.dispatch_interval_s + 10)
