"""The checkpoint registry of a job: what the worker registers, lists and retires.

The registry is part of the job's event history, which only grows: a checkpoint retired by
retention (or replaced by a newer save under the same path) keeps its row, marked
`deleted_at`, so its `checkpoint` event is still there for a client replaying the stream, and
its retirement is an event of its own, `checkpoint_deleted`. Everything that lists, resolves
or downloads checkpoints sees only the live ones (`list_checkpoints`).
"""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import update
from sqlmodel import Session, col, select

from service.models import Checkpoint, utcnow
from service.records.lifecycle import allocate_seq, insert_event, new_id
from service.records.webhook_outbox import enqueue_checkpoint_deliveries

CHECKPOINT_DELETED = "checkpoint_deleted"


def register_checkpoint(
    session: Session,
    job_id: str,
    attempt: int,
    *,
    path: str,
    step: int | None,
    epoch: int | None,
    metrics: dict[str, float],
    size: int,
    sha256: str,
    kind: str = "file",
    files: int = 1,
    manifest: list[dict[str, Any]] | None = None,
) -> Checkpoint:
    """Insert a verified checkpoint (`path` relative to the data dir: a file, or with `kind`
    "dir" a directory, whose `size` and `sha256` are its canonical tar stream's) and commit.

    A file saved again under the same name retires the row of its earlier version.
    AttemptSuperseded, writing nothing, unless the job is active at `attempt`.
    """
    # First: the job row lock orders every writer alike.
    seq = allocate_seq(session, job_id, attempt=attempt)
    replaced = session.exec(
        select(Checkpoint).where(
            Checkpoint.job_id == job_id,
            Checkpoint.path == path,
            col(Checkpoint.deleted_at).is_(None),
        )
    ).all()
    if replaced:
        retired_from = allocate_seq(session, job_id, len(replaced), attempt=attempt)
        _retire(session, list(replaced), attempt, retired_from)
    checkpoint = Checkpoint(
        id=new_id(),
        job_id=job_id,
        seq=seq,
        attempt=attempt,
        step=step,
        epoch=epoch,
        metrics=metrics,
        size=size,
        sha256=sha256,
        path=path,
        kind=kind,
        files=files,
        manifest=manifest,
        created_at=utcnow(),
    )
    session.add(checkpoint)
    session.flush()
    enqueue_checkpoint_deliveries(session, checkpoint)
    session.commit()
    return checkpoint


def delete_checkpoints(
    session: Session, job_id: str, attempt: int, checkpoint_ids: Sequence[str]
) -> list[Checkpoint]:
    """Retire live checkpoints of a job (their files are the caller's) and commit: each row is
    marked deleted and a `checkpoint_deleted` event recorded. Returns the rows retired.
    AttemptSuperseded, writing nothing, unless the job is active at `attempt`."""
    if not checkpoint_ids:
        return []
    rows = session.exec(
        select(Checkpoint)
        .where(
            Checkpoint.job_id == job_id,
            col(Checkpoint.id).in_(list(checkpoint_ids)),
            col(Checkpoint.deleted_at).is_(None),
        )
        .order_by(col(Checkpoint.seq))
    ).all()
    if not rows:
        session.rollback()
        return []
    seq = allocate_seq(session, job_id, len(rows), attempt=attempt)
    _retire(session, list(rows), attempt, seq)
    session.commit()
    return list(rows)


def _retire(session: Session, rows: list[Checkpoint], attempt: int, first_seq: int) -> None:
    """Mark `rows` deleted, each with its event at the seqs from `first_seq` (not committed)."""
    now = utcnow()
    for i, row in enumerate(rows):
        session.execute(
            update(Checkpoint).where(col(Checkpoint.id) == row.id).values(deleted_at=now)
        )
        data = {"id": row.id, "path": row.path, "step": row.step, "epoch": row.epoch}
        insert_event(session, row.job_id, CHECKPOINT_DELETED, attempt, first_seq + i, data)


def retired_paths(session: Session, job_id: str) -> set[str]:
    """The paths of the job's retired checkpoints that no live checkpoint holds: the objects
    retention meant to remove (a pass cut off after its commit may have left them)."""
    rows = session.exec(
        select(Checkpoint.path, Checkpoint.deleted_at).where(Checkpoint.job_id == job_id)
    ).all()
    live = {path for path, deleted_at in rows if deleted_at is None}
    return {path for path, deleted_at in rows if deleted_at is not None} - live


def list_checkpoints(session: Session, job_id: str) -> list[Checkpoint]:
    """The job's live checkpoints (not retired), oldest first."""
    stmt = (
        select(Checkpoint)
        .where(Checkpoint.job_id == job_id, col(Checkpoint.deleted_at).is_(None))
        .order_by(col(Checkpoint.seq))
    )
    return list(session.exec(stmt).all())
