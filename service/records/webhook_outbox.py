"""The webhook outbox: the deliveries a job's events make, written in the transaction that
records the event, so an event is announced exactly when it is committed, and a delivery
survives any restart (the API's delivery loop, `service.webhook_delivery`, sends it).

Writing a row is all the job's lifecycle does for webhooks: it never waits on an endpoint.
The body is made here, once: a retry sends the same bytes (with a new signature).

At the bottom of the store, below `lifecycle` (which calls it for state events).
"""

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, or_, select
from sqlmodel import Session, col

from jobs.contract.checkpoints import CheckpointPolicy
from jobs.states import JobState
from service.models import Checkpoint, Job, Webhook, WebhookDelivery, utcnow
from service.schemas import CheckpointPublic, CheckpointsPublic, JobPublic

# The event kinds an endpoint may ask for (`POST /v1/webhooks`, "events").
WEBHOOK_EVENTS = ("state", "terminal", "checkpoint", "best")


def _hooks_for_job(session: Session, job_id: str, kinds: set[str]) -> list[Webhook]:
    """The endpoints told of this job's events of `kinds`: its owner's, and every-job ones."""
    owner = select(col(Job.owner)).where(col(Job.id) == job_id).scalar_subquery()
    stmt = select(Webhook).where(or_(col(Webhook.owner) == owner, col(Webhook.all_jobs)))
    hooks = [row[0] for row in session.execute(stmt).all()]
    return [h for h in hooks if kinds & set(h.events)]


def _job_snapshot(session: Session, job_id: str) -> dict[str, Any] | None:
    """The job as clients see it now, within the caller's transaction."""
    row = session.execute(select(Job.__table__).where(col(Job.id) == job_id)).first()  # type: ignore[attr-defined]
    if row is None:
        return None
    job = Job.model_construct(**row._mapping)
    return JobPublic.model_validate(job).model_dump(mode="json")


def slack_text(kind: str, job: dict[str, Any], extra: dict[str, Any]) -> str:
    """One line for a chat channel, as Slack's incoming webhooks show `{"text": ...}`."""
    name, job_id, state = job.get("name"), job.get("id"), job.get("state")
    if kind in ("checkpoint", "best"):
        ckpt = extra.get("checkpoint") or {}
        what = "new best checkpoint" if kind == "best" else "checkpoint"
        metrics = ", ".join(f"{k}={v:g}" for k, v in (ckpt.get("metrics") or {}).items())
        return f"Launchbay: job {name} ({job_id}) saved a {what} at step {ckpt.get('step')}" + (
            f" ({metrics})" if metrics else ""
        )
    reason = job.get("exit_reason")
    tail = f" ({reason}: {job.get('message')})" if reason and reason != "completed" else ""
    return f"Launchbay: job {name} ({job_id}) is {state}{tail}"


def delivery_body(
    hook: Webhook, delivery_id: str, kind: str, job: dict[str, Any], extra: dict[str, Any]
) -> str:
    created = datetime.now(UTC).isoformat()
    if hook.format == "slack":
        payload: dict[str, Any] = {"text": slack_text(kind, job, extra)}
    else:
        payload = {"id": delivery_id, "type": kind, "created_at": created, "job": job, **extra}
    return json.dumps(payload, separators=(",", ":"))


def enqueue_deliveries(
    session: Session,
    job_id: str,
    seq: int,
    kinds: list[str],
    extra: dict[str, Any] | None = None,
) -> int:
    """Add (not committed) one delivery per endpoint and kind in `kinds` it subscribes to, for
    the event at `seq`. Returns how many."""
    hooks = _hooks_for_job(session, job_id, set(kinds))
    if not hooks:
        return 0
    job = _job_snapshot(session, job_id)
    if job is None:
        return 0
    now = utcnow()
    rows = []
    for hook in hooks:
        for offset, kind in enumerate(kinds):
            if kind not in hook.events:
                continue
            delivery_id = uuid.uuid4().hex
            rows.append(
                {
                    "id": delivery_id,
                    "webhook_id": hook.id,
                    "job_id": job_id,
                    "position": 2 * seq + offset,
                    "type": kind,
                    "body": delivery_body(hook, delivery_id, kind, job, extra or {}),
                    "status": "pending",
                    "attempts": 0,
                    "created_at": now,
                    "next_attempt_at": now,
                }
            )
    if rows:
        session.execute(insert(WebhookDelivery), rows)
    return len(rows)


def enqueue_state_deliveries(session: Session, job_id: str, state: JobState, seq: int) -> int:
    """The deliveries of a state event: `state`, then `terminal` for a terminal one."""
    kinds = ["state", "terminal"] if state.is_terminal() else ["state"]
    return enqueue_deliveries(session, job_id, seq, kinds)


def enqueue_checkpoint_deliveries(session: Session, checkpoint: Checkpoint) -> int:
    """The deliveries of a registered checkpoint (flushed in the session): `checkpoint`, then
    `best` when it is the job's new best by its spec's `best_metric`. The delivery carries the
    checkpoint as the job's listing shows it now (`best` and `latest` marked)."""
    if not _hooks_for_job(session, checkpoint.job_id, {"checkpoint", "best"}):
        return 0
    policy, listed = _as_listed(session, checkpoint)
    kinds = ["checkpoint"]
    if policy.best_metric and listed.best:
        kinds.append("best")
    extra = {"checkpoint": listed.model_dump(mode="json")}
    return enqueue_deliveries(session, checkpoint.job_id, checkpoint.seq, kinds, extra)


def _as_listed(
    session: Session, checkpoint: Checkpoint
) -> tuple[CheckpointPolicy, CheckpointPublic]:
    spec = session.execute(select(col(Job.spec)).where(col(Job.id) == checkpoint.job_id)).scalar()
    policy = CheckpointPolicy.model_validate((spec or {}).get("checkpoint") or {})
    live = session.execute(
        select(Checkpoint)
        .where(col(Checkpoint.job_id) == checkpoint.job_id, col(Checkpoint.deleted_at).is_(None))
        .order_by(col(Checkpoint.seq))
    ).scalars()
    listing = CheckpointsPublic.marked(policy, list(live))
    listed = next((c for c in listing.items if c.id == checkpoint.id), None)
    return policy, listed or CheckpointPublic.from_row(checkpoint)
