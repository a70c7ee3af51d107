"""One attempt of a job, from `queued` to its end: take it, prepare and launch it, have it
monitored (`worker.monitor`) with its heartbeat beside (`worker.heartbeat`), and record how
it ended (`worker.attempt_end`, through `service.records.end_attempt`): a failure whose exit
reason is retried, while the spec's `max_retries` allow, puts the job back to `queued` as the
next attempt, which the executor then submits (`service.executors.base.submit_retry`).

Every state change is conditional (`service.records.transition_job` with the attempt), so an
attempt that was cancelled while queued, taken by someone else or retried is left alone.

A multi-node job (`nnodes` > 1) runs as one task per node (`node`): each joins the attempt
(`service.records.join_node`; the first hosts torch's c10d rendezvous), runs its share of the
ranks, and records how it ended with `service.records.finish_node`, which ends the attempt as a
whole: at the first failure, or once every node has succeeded (docs/multi-node.md).
"""

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.engine import Connection

from jobs.contract import env as rank_env
from jobs.spec import JobSpec
from jobs.states import AttemptRef, ExitReason, JobState
from service.artifacts import store_for
from service.db import session_scope
from service.models import utcnow
from service.records import NodeSeat, TakenJob, join_node, take_job
from service.scheduling.reservations import reservations_of
from worker import build_cache, carried_state
from worker.attempt_end import announcer, record_lost, record_outcome, with_notes
from worker.context import AttemptServices
from worker.disk import record_job_disk_use
from worker.environment import EnvironmentProblem, release_environments
from worker.fetch import fetch_code
from worker.heartbeat import AttemptHeartbeat
from worker.isolation import JobUser, can_switch_users, isolate_attempt
from worker.job_environment import prepare_environment
from worker.launch import LaunchPlan, Rendezvous, RunPaths
from worker.launch_path import choose_launch_path
from worker.monitor import AttemptMonitor
from worker.orphans import leave_note, remove_note
from worker.outcome import Outcome
from worker.outputs import kept_as_artifacts
from worker.passed_env import held_back
from worker.prepare import (
    CudaInfo,
    LaunchProblem,
    detect_cuda,
    free_port,
    parse_spec,
    prepare_attempt,
)
from worker.process_tree import ProcessRecord, shutdown_requested
from worker.workdir import WorkDir

log = logging.getLogger(__name__)


@dataclass
class AttemptResult:
    """What happened, for the caller and for tests: the outcome and whether it was recorded."""

    ref: AttemptRef
    paths: RunPaths
    outcome: Outcome | None = None
    recorded: bool = False
    # The job was put back to `queued` as attempt + 1 instead of failing.
    retried: bool = False
    processes: list[ProcessRecord] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class TakenAttempt:
    """An attempt this worker has taken (a node it has joined): what running it needs."""

    ref: AttemptRef
    worker_name: str
    # The job's owner, whose compiled ops a job user's home gets (`worker.build_cache`).
    owner: str
    spec: dict[str, Any]
    rendezvous: Rendezvous | None
    # The devices the dispatcher reserved for this node (None: not dispatched).
    reserved: tuple[str, ...] | None = None
    # Whether the spec named its launcher (then that launcher, cold: `worker.launch_path`).
    launcher_given: bool = True


def take_attempt(
    services: AttemptServices, ref: AttemptRef, *, worker_name: str
) -> TakenAttempt | None:
    """Take the attempt (queued → starting), or join it as its node; None, having changed
    nothing, when it is not to be run."""
    settings = services.settings
    now = utcnow()
    seat: NodeSeat | None = None
    with session_scope(services.engine) as session:
        if ref.node is None:
            job = take_job(
                session,
                ref.job_id,
                ref.attempt,
                worker=worker_name,
                started_at=now,
                last_heartbeat=now,
            )
        else:
            host = settings.worker_host
            seat = join_node(
                session,
                ref.job_id,
                ref.attempt,
                ref.node,
                worker=worker_name,
                host=host,
                endpoint=f"{host}:{free_port('')}",
            )
            job = None if seat is None else TakenJob(seat.spec, seat.owner)
        # On the session's connection, once the attempt is taken (and committed).
        reserved = None if job is None else reserved_for(session.connection(), ref)
    if job is None:
        log.info("%s: not to be run any more; skipped", ref)
        return None
    if seat is None or ref.node is None:
        return TakenAttempt(
            ref, worker_name, job.owner, job.spec, None, reserved, job.launcher_given
        )
    rendezvous = Rendezvous(
        endpoint=seat.endpoint,
        is_host=seat.is_host,
        local_addr=settings.worker_host,
        timeout_s=seat.rendezvous_timeout_s or settings.rendezvous_timeout_s,
        node=ref.node,
    )
    return TakenAttempt(ref, worker_name, job.owner, job.spec, rendezvous, reserved)


def reserved_for(connection: Connection, ref: AttemptRef) -> tuple[str, ...] | None:
    """The devices the dispatcher reserved for this node of the attempt, if it did."""
    found = reservations_of(connection, ref.job_id, ref.attempt)
    node = ref.node or 0
    return next((r.devices for r in found if r.node == node), None)


def run_taken(
    services: AttemptServices,
    taken: TakenAttempt,
    *,
    cuda: CudaInfo | None = None,
    leave_shutdown: bool = False,
    on_shutdown: Callable[[], None] | None = None,
) -> AttemptResult:
    """Run a taken attempt to its end and record how it ended.

    With `leave_shutdown`, an attempt stopped because its supervisor was told to shut down
    records nothing: its executor knows why (Slurm's time limit, preemption or scancel) and
    the reaper records that (`service.reaper.reap_ended_tasks`). `on_shutdown` runs before
    the outcome of an attempt stopped because its supervisor was told to shut down."""
    ref, settings = taken.ref, services.settings
    paths = RunPaths.for_attempt(settings.data_dir.resolve(), ref.job_id, ref.attempt, ref.node)
    result = AttemptResult(ref, paths)
    heartbeat = AttemptHeartbeat(
        services.engine, ref, interval_s=settings.heartbeat_interval_s
    ).start()
    try:
        _run(services, result, taken, heartbeat, cuda)
        if ref.node is None and result.outcome is None:
            return result  # taken away
        if leave_shutdown and shutdown_requested():
            log.warning("%s: stopped on request of its executor; the reaper records why", ref)
            return result
        if on_shutdown is not None and shutdown_requested():
            on_shutdown()  # before the outcome: its retry is admitted as soon as it is recorded
        end = record_outcome(services.engine, ref, result.outcome, executor=services.executor)
        result.recorded, result.retried = end.recorded, end.retried
        if not end.stored:
            log.error("%s: the database never took its outcome %s", ref, result.outcome)
        elif ref.node is None and not result.recorded:
            log.warning(
                "%s was moved by someone else; outcome %s not recorded", ref, result.outcome
            )
    finally:
        heartbeat.stop()
        record_job_disk_use(services.engine, ref.job_id, paths.data_dir)
        if not result.survivors:
            remove_note(paths.data_dir, ref.job_id, ref.attempt, ref.node)
    return result


def abandon(services: AttemptServices, taken: TakenAttempt) -> None:
    """Give up an attempt taken but never started, because the worker is shutting down: it
    ends as `worker_lost` (retried while `max_retries` allow), like one stopped mid-run."""
    record_lost(services, taken.ref, f"worker {taken.worker_name} shut down before the job started")


def _run(
    services: AttemptServices,
    result: AttemptResult,
    taken: TakenAttempt,
    heartbeat: AttemptHeartbeat,
    cuda: CudaInfo | None,
) -> None:
    """Prepare, launch and monitor the attempt; its outcome (or None) goes into `result`."""
    ref, paths, settings = result.ref, result.paths, services.settings
    job_user: JobUser | None = None
    owner: str | None = None
    work: WorkDir | None = None
    monitor: AttemptMonitor | None = None
    try:
        owner = taken.owner if can_switch_users() else None
        spec, plan, job_user = _prepare(services, result, taken, cuda, owner)
        work = WorkDir(paths.work_dir, paths.output_dir, kept_as_artifacts(spec))
        work.record()
        leave_note(paths.data_dir, ref.job_id, ref.attempt, paths.pids_file, ref.node)
        monitor = AttemptMonitor(
            services.engine,
            settings,
            ref,
            spec=spec,
            plan=plan,
            paths=paths,
            worker_name=taken.worker_name,
            heartbeat=heartbeat,
            rendezvous=taken.rendezvous,
            announce=None if ref.node is None else announcer(services.engine, ref),
            job_user=job_user,
            launch=choose_launch_path(
                spec,
                launcher_given=taken.launcher_given,
                enabled=settings.warm_start,
                has_pool=services.warm_pool is not None,
            ),
            warm_pool=services.warm_pool,
            owner=taken.owner,
        )
        result.outcome, result.survivors = monitor.run()
        if monitor.tree is not None:
            result.processes = list(monitor.tree.records.values())
    except LaunchProblem as exc:
        result.outcome = Outcome(JobState.FAILED, ExitReason.LAUNCH_ERROR, None, str(exc))
    except EnvironmentProblem as exc:
        result.outcome = Outcome(JobState.FAILED, ExitReason.ENVIRONMENT_ERROR, None, str(exc))
    except BaseException as exc:
        message = f"the worker failed while supervising the job: {type(exc).__name__}: {exc}"
        record_lost(services, ref, message)
        raise
    finally:
        release_environments()
        if job_user is not None:
            job_user.release()
            if owner is not None:
                build_cache.save(paths.data_dir, owner, paths.home_dir)
        _leave_attempt(paths, work, job_user)
    if monitor is not None and result.outcome is not None:
        _add_notes(services, result, monitor)


def _add_notes(services: AttemptServices, result: AttemptResult, monitor: AttemptMonitor) -> None:
    """The outcome's notes and warnings, once what the program wrote in its working directory
    is kept (an output file, for the warnings)."""
    assert result.outcome is not None
    try:
        succeeded = result.outcome.state is JobState.SUCCEEDED
        notes, warnings = monitor.notes(succeeded), monitor.warnings(succeeded)
        result.outcome = with_notes(result.outcome, notes, warnings)
    except BaseException as exc:
        message = f"the worker failed while supervising the job: {type(exc).__name__}: {exc}"
        record_lost(services, result.ref, message)
        raise


def _leave_attempt(paths: RunPaths, work: WorkDir | None, job_user: JobUser | None) -> None:
    """When nothing of the attempt runs any more: what the program wrote in its working
    directory kept as artifacts, and its private directories gone from the host (a multi-node
    attempt's checkpoint directory, which its nodes share, goes with the job)."""
    owner = (os.getuid(), os.stat(paths.data_dir).st_gid) if job_user is not None else None
    if work is not None:
        try:
            work.finish(None if job_user is None else job_user.uid, owner)
        except OSError:
            log.warning("%s: what it wrote could not all be kept", paths.work_dir, exc_info=True)
    shutil.rmtree(paths.work_dir, ignore_errors=True)
    shutil.rmtree(paths.home_dir, ignore_errors=True)
    if paths.checkpoint_dir.parent == paths.run_dir:
        carried_state.keep(paths)
        shutil.rmtree(paths.checkpoint_dir, ignore_errors=True)


def _prepare(
    services: AttemptServices,
    result: AttemptResult,
    taken: TakenAttempt,
    cuda: CudaInfo | None,
    owner: str | None,
) -> tuple[JobSpec, LaunchPlan, JobUser | None]:
    """The job's code and environment, the checks, directories and launch plan, and its job
    user (with the `owner`'s compiled ops in its home, when it has one)."""
    ref, paths, settings = result.ref, result.paths, services.settings
    spec = parse_spec(taken.spec)
    artifacts = store_for(settings)
    if spec.code is not None:  # its requirements.txt is read next
        fetch_code(artifacts, settings.code_dir, spec.code.code_id)
    environment = prepare_environment(
        services.engine,
        settings,
        spec,
        job_id=ref.job_id,
        attempt=ref.attempt,
        paths=paths,
        node=ref.node,
    )
    plan = prepare_attempt(
        services.engine,
        spec=spec,
        job_id=ref.job_id,
        attempt=ref.attempt,
        paths=paths,
        code_store=settings.code_dir,
        cuda=cuda or detect_cuda(),
        collective_timeout_s=settings.collective_timeout_s,
        rendezvous=taken.rendezvous,
        python=str(environment.python) if environment is not None else None,
        store=artifacts,
        reserved=taken.reserved,
        pass_env=settings.job_pass_env,
    )
    limit = {rank_env.TENSORBOARD_MAX_POINTS: str(settings.tensorboard_max_points)}
    plan = replace(plan, env={**plan.env, **limit})
    for name in held_back(os.environ, settings.job_pass_env):
        log.warning("%s holds a password: not passed to job %s", name, ref.job_id)
    if owner is not None:
        build_cache.restore(paths.data_dir, owner, paths.home_dir)
    job_user = isolate_attempt(
        paths,
        ref.job_id,
        pool_size=settings.job_users,
        lease_dir=settings.job_user_lease_dir,
        prefix=settings.job_user_prefix,
        multi_node=ref.node is not None,
    )
    if job_user is not None:
        builds = build_cache.env(paths.home_dir, spec.env)
        plan = replace(plan, env={**plan.env, **job_user.env(paths), **builds})
    return spec, plan, job_user
