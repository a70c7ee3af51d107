"""The goodput ledger's records (docs/goodput.md): each attempt's marks as the worker writes
them, the attempts read back from a job's state and environment events, and each job's ledger
(`jobs.contract.goodput`), stored once when the job ends.

Below `lifecycle` (which stores the ledger in the transaction of a job's terminal move): it
imports no other module of the store.
"""

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from jobs.contract.goodput import (
    TRAINING,
    AttemptMarks,
    AttemptRecord,
    Ledger,
    job_ledger,
)
from jobs.states import JobState
from service.models import AttemptMark, Job, JobEvent, JobGoodput

log = logging.getLogger(__name__)
_mark = AttemptMark.__table__  # type: ignore[attr-defined]
_job = Job.__table__  # type: ignore[attr-defined]
_event = JobEvent.__table__  # type: ignore[attr-defined]
_goodput = JobGoodput.__table__  # type: ignore[attr-defined]
TERMINAL = frozenset(str(s) for s in JobState if s.is_terminal())


def save_attempt_marks(
    connection: Connection, job_id: str, attempt: int, node: int, marks: AttemptMarks
) -> None:
    """Write one node's marks of an attempt (not committed): its one row, replaced."""
    values = asdict(marks)
    key = (_mark.c.job_id == job_id, _mark.c.attempt == attempt, _mark.c.node == node)
    if connection.execute(update(_mark).where(*key).values(**values)).rowcount == 0:
        row = {"job_id": job_id, "attempt": attempt, "node": node, **values}
        connection.execute(insert(_mark).values(**row))


@dataclass(frozen=True)
class LedgerJob:
    """What of a job's row its ledger needs."""

    id: str
    owner: str
    queue: str
    name: str
    state: str
    attempt: int
    devices: int
    pending_reason: str | None
    finished_at: datetime | None


LEDGER_JOB_COLUMNS = (
    _job.c.id,
    _job.c.owner,
    _job.c.queue,
    _job.c.name,
    _job.c.state,
    _job.c.attempt,
    _job.c.spec,
    _job.c.pending_reason,
    _job.c.finished_at,
)


def ledger_job(row: Any) -> LedgerJob:
    spec = row.spec or {}
    devices = int(spec.get("nnodes", 1) or 1) * int(spec.get("nproc_per_node", 1) or 1)
    return LedgerJob(
        row.id,
        row.owner,
        row.queue,
        row.name,
        str(row.state),
        int(row.attempt),
        devices,
        row.pending_reason,
        row.finished_at,
    )


def _merged(rows: Iterable[Any]) -> AttemptMarks:
    """The nodes' marks of one attempt as one (only rank 0's node sees the events file)."""
    rows = list(rows)

    def pick(name: str, how: Any) -> Any:
        values = [getattr(r, name) for r in rows if getattr(r, name) is not None]
        return how(values) if values else None

    return AttemptMarks(
        first_step_at=pick("first_step_at", min),
        last_progress_at=pick("last_progress_at", max),
        checkpoint_stall_s=pick("checkpoint_stall_s", max) or 0.0,
        checkpoint_saves=pick("checkpoint_saves", max) or 0,
        eval_s=pick("eval_s", max) or 0.0,
        evals=pick("evals", max) or 0,
        last_checkpoint_at=pick("last_checkpoint_at", max),
        ended_at=pick("ended_at", max),
        hang_since=pick("hang_since", min),
    )


def attempt_records(
    job: LedgerJob, events: Sequence[Any], marks: dict[int, AttemptMarks]
) -> list[AttemptRecord]:
    """The job's attempts from its state and environment events, in seq order."""
    found: dict[int, dict[str, Any]] = {}
    for ev in events:
        data = ev.data or {}
        record = found.setdefault(int(ev.attempt), {"attempt": int(ev.attempt)})
        if ev.kind == "environment":
            record["environment_end_at"] = ev.ts
            record["environment_s"] = float(data.get("seconds") or 0.0)
            record["environment_cached"] = bool(data.get("cached"))
            continue
        state = data.get("state")
        if state == JobState.QUEUED.value:
            record.setdefault("queued_at", ev.ts)
            before = found.get(int(ev.attempt) - 1)
            if before is not None and "end_at" not in before:
                before.update(end_at=ev.ts, retried=True, exit_reason=data.get("exit_reason"))
        elif state == JobState.STARTING.value:
            record.setdefault("started_at", ev.ts)
            record["pending_reason"] = data.get("pending_reason")
        elif state == JobState.RUNNING.value:
            record.setdefault("running_at", ev.ts)
        elif state in TERMINAL:
            record.setdefault("end_at", ev.ts)
            record["exit_reason"] = data.get("exit_reason")
    records, previous_end = [], None
    for number in sorted(found):
        record = found[number]
        queued_at = record.pop("queued_at", None)
        if queued_at is None:
            queued_at = previous_end or record.get("started_at") or record.get("end_at") or 0.0
        if number == job.attempt and job.state == JobState.QUEUED.value:
            record["pending_reason"] = job.pending_reason
        attempt = AttemptRecord(queued_at=queued_at, **record)
        records.append(replace(attempt, marks=marks.get(number, AttemptMarks())))
        previous_end = attempt.end_at
    return records


def read_ledgers(
    connection: Connection, jobs: Sequence[LedgerJob], now: float | None = None
) -> dict[str, Ledger]:
    """The ledgers of `jobs`, computed now from their events and marks (three queries)."""
    if not jobs:
        return {}
    ids = [job.id for job in jobs]
    events: dict[str, list[Any]] = defaultdict(list)
    rows = connection.execute(
        select(_event.c.job_id, _event.c.kind, _event.c.attempt, _event.c.ts, _event.c.data)
        .where(_event.c.job_id.in_(ids), _event.c.kind.in_(("state", "environment")))
        .order_by(_event.c.job_id, _event.c.seq)
    )
    for row in rows:
        events[row.job_id].append(row)
    by_attempt: dict[str, dict[int, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for row in connection.execute(select(_mark).where(_mark.c.job_id.in_(ids))):
        by_attempt[row.job_id][int(row.attempt)].append(row)
    moment = time.time() if now is None else now
    ledgers = {}
    for job in jobs:
        marks = {n: _merged(rows) for n, rows in by_attempt.get(job.id, {}).items()}
        records = attempt_records(job, events.get(job.id, []), marks)
        ledgers[job.id] = job_ledger(records, job.devices, moment)
    return ledgers


def ledger_body(ledger: Ledger, job_id: str, final: bool) -> dict[str, Any]:
    """The answer of `GET /v1/jobs/{id}/goodput` (docs/goodput.md)."""

    def whole(one: Ledger) -> dict[str, Any]:
        return {
            "wall_s": one.wall_s,
            "device_s": one.device_s,
            "goodput": one.goodput,
            "parts": [asdict(part) for part in one.parts],
        }

    attempts = [{"attempt": a.attempt, **whole(a.ledger)} for a in ledger.attempts]
    return {"job_id": job_id, "final": final, **whole(ledger), "attempts": attempts}


def store_job_ledger(connection: Connection, job_id: str) -> None:
    """Compute an ended job's ledger and store it (not committed): in the transaction of its
    terminal move, which it sees."""
    row = connection.execute(select(*LEDGER_JOB_COLUMNS).where(_job.c.id == job_id)).first()
    if row is None or str(row.state) not in TERMINAL:
        return
    job = ledger_job(row)
    try:
        ledger = read_ledgers(connection, [job])[job_id]
    except Exception:  # a fault of the ledger's own must never keep a job from ending
        log.exception("job %s: goodput ledger not stored", job_id)
        return
    seconds = {f"{part.name}_s": part.seconds for part in ledger.parts}
    trained = ledger.part(TRAINING).device_seconds
    ended = job.finished_at or datetime.now(UTC)
    connection.execute(delete(_goodput).where(_goodput.c.job_id == job_id))
    connection.execute(
        insert(_goodput).values(
            job_id=job_id,
            owner=job.owner,
            queue=job.queue,
            name=job.name,
            state=job.state,
            ended_at=ended if ended.tzinfo else ended.replace(tzinfo=UTC),
            devices=job.devices,
            wall_s=ledger.wall_s,
            device_s=ledger.device_s,
            badput_device_s=ledger.device_s - trained,
            ledger=ledger_body(ledger, job_id, final=True),
            **seconds,
        )
    )


def stored_ledger(connection: Connection, job_id: str) -> dict[str, Any] | None:
    """An ended job's stored ledger, as answered."""
    body = connection.execute(
        select(_goodput.c.ledger).where(_goodput.c.job_id == job_id)
    ).scalar_one_or_none()
    return dict(body) if body is not None else None
