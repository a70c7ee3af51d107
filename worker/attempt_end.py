"""Recording how an attempt (or one node of it) ended: the outcome written through an outage
of the database, a retry submitted to the executor, a node's failure announced to its peers.

The outcome is what the worker alone knows (a rank's error, a timeout), so it is tried again
until the database takes it, for up to `OUTCOME_RETRY_S`; the reaper, meanwhile, declares no
job lost until the database has been back for a while (`service.reaper`)."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.engine import Engine

from jobs.states import AttemptRef, ExitReason, JobState, NodeState
from service.db import session_scope
from service.executors.base import Executor, submit_retry
from service.records import (
    AttemptEnd,
    add_job_warnings,
    announce_node_failure,
    commit_end,
    end_attempt,
    finish_node,
)
from worker.context import AttemptServices
from worker.db_retry import retry_db, retry_db_for
from worker.outcome import Outcome

# How long a worker tries to record an outcome while the database does not take it.
OUTCOME_RETRY_S = 3600.0


@dataclass(frozen=True)
class RecordedEnd:
    """What became of an outcome: `recorded` (it changed the job), `retried` (the job was
    queued again as the next attempt), `stored` (the database answered: False when it never
    took the write, so nothing was recorded)."""

    recorded: bool
    retried: bool
    stored: bool = True


def record_outcome(
    engine: Engine,
    ref: AttemptRef,
    outcome: Outcome | None,
    *,
    executor: Executor | None = None,
) -> RecordedEnd:
    """Record how the attempt (its node, for a multi-node job) ended, tried again while the
    database is away, for up to `OUTCOME_RETRY_S`. Not `recorded` when the job was no longer this
    attempt's, or when the database never took it (not `stored`).

    The end itself is `service.records.end_attempt` (`finish_node` for a node, which changes the
    job only when this decides the attempt; `outcome` None: the node was stopped because the
    attempt ended elsewhere). A failure is retried only given the `executor` that submits the
    next attempt.
    """
    job_id, attempt, node = ref.job_id, ref.attempt, ref.node

    def write() -> AttemptEnd:
        with session_scope(engine) as session:
            if outcome is not None and outcome.warnings:
                add_job_warnings(session, job_id, attempt, outcome.warnings)
            if node is not None:
                if outcome is None:
                    return finish_node(session, job_id, attempt, node, state=NodeState.STOPPED)
                return finish_node(
                    session,
                    job_id,
                    attempt,
                    node,
                    state=NodeState(outcome.state),
                    exit_reason=outcome.reason,
                    exit_code=outcome.exit_code,
                    message=outcome.message,
                )
            assert outcome is not None
            end = end_attempt(
                session,
                job_id,
                attempt,
                outcome.state,
                exit_reason=outcome.reason,
                exit_code=outcome.exit_code,
                message=outcome.message,
                retry=executor is not None,
            )
            return commit_end(session, end)

    stored, end = retry_db_for(write, f"recording how {ref} ended", OUTCOME_RETRY_S)
    if end is None:
        return RecordedEnd(recorded=False, retried=False, stored=stored)
    if executor is not None:
        submit_retry(executor, end)
    return RecordedEnd(end.recorded, end.retried is not None)


def with_notes(outcome: Outcome, notes: str | None, warnings: Sequence[str] = ()) -> Outcome:
    """The outcome with the supervisor's notes added to its message, and its warnings."""
    outcome = replace(outcome, warnings=(*outcome.warnings, *warnings))
    if not notes:
        return outcome
    message = f"{outcome.message}\n({notes})" if outcome.message else notes
    return replace(outcome, message=message)


def record_lost(services: AttemptServices, ref: AttemptRef, message: str) -> None:
    """The attempt ends as `worker_lost` (retried while `max_retries` allow)."""
    lost = Outcome(JobState.FAILED, ExitReason.WORKER_LOST, None, message)
    record_outcome(services.engine, ref, lost, executor=services.executor)


def announcer(engine: Engine, ref: AttemptRef) -> Callable[[Outcome], None]:
    """What a node of a multi-node job calls before it stops its processes for a failure."""
    node = ref.node
    assert node is not None

    def announce(outcome: Outcome) -> None:
        def write() -> None:
            with session_scope(engine) as session:
                announce_node_failure(
                    session,
                    ref.job_id,
                    ref.attempt,
                    node,
                    exit_reason=outcome.reason,
                    message=outcome.message or str(outcome.reason),
                )

        retry_db(write, f"announcing the failure of {ref}", tries=2)

    return announce
