"""Webhooks and their deliveries (the outbox that the API's delivery loop sends)."""

from datetime import datetime

from sqlalchemy import JSON, BigInteger, Boolean, Column, Index, Text
from sqlmodel import Field, SQLModel

from service.models.columns import utcnow


class Webhook(SQLModel, table=True):
    """An endpoint that is told of jobs' events: its owner's jobs, or every job (`all_jobs`,
    an admin's). The secret signs each delivery, so it is kept as given (shown once)."""

    __tablename__ = "webhook"

    id: str = Field(primary_key=True, max_length=32)
    owner: str = Field(max_length=128, index=True)
    url: str = Field(sa_column=Column(Text, nullable=False))
    events: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # `json` (the documented body) or `slack` (`{"text": ...}`, for Slack's incoming webhooks).
    format: str = Field(default="json", max_length=16)
    all_jobs: bool = Field(default=False, sa_column=Column(Boolean, nullable=False))
    secret: str = Field(max_length=128, repr=False)
    created_at: datetime = Field(default_factory=utcnow)


class WebhookDelivery(SQLModel, table=True):
    """One event for one endpoint: the outbox row the API's delivery loop sends, retries and
    records. Deliveries of a job to an endpoint go in `position` order: the job's event seq
    times two, plus one for the second delivery of one event (`terminal` after `state`, `best`
    after `checkpoint`)."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (
        Index("ix_webhook_delivery_due", "status", "next_attempt_at"),
        Index("ix_webhook_delivery_hook_job_position", "webhook_id", "job_id", "position"),
    )

    id: str = Field(primary_key=True, max_length=32)
    webhook_id: str = Field(max_length=32)
    job_id: str = Field(max_length=32)
    position: int = Field(sa_type=BigInteger)
    type: str = Field(max_length=16)
    body: str = Field(sa_column=Column(Text, nullable=False))
    # pending (to send, or to retry), delivered, failed (gave up).
    status: str = Field(default="pending", max_length=16)
    attempts: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    next_attempt_at: datetime = Field(default_factory=utcnow)
    # Set at the first attempt (and again on a redelivery): retries stop after it.
    give_up_at: datetime | None = None
    claimed_until: datetime | None = None
    last_attempt_at: datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = Field(default=None, sa_column=Column(Text))
    delivered_at: datetime | None = None
