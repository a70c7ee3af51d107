"""Webhooks: endpoints told of jobs' events (their owner's jobs; an admin's may ask for all),
their deliveries, and redelivery. Signing and sending: `service.webhook_delivery`."""

import secrets
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import delete, update
from sqlmodel import col, select

from service.deps import CurrentPrincipal, SessionDep, SettingsDep
from service.errors import Conflict, Forbidden, NotFound, Unprocessable
from service.models import Webhook, WebhookDelivery, utcnow
from service.records.lifecycle import new_id
from service.records.webhook_outbox import WEBHOOK_EVENTS
from service.webhook_addresses import MAX_URL_LENGTH, ForbiddenAddress, resolve_target

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
MAX_WEBHOOKS_PER_OWNER = 50
EventKind = Literal["state", "terminal", "checkpoint", "best"]
assert set(EventKind.__args__) == set(WEBHOOK_EVENTS)  # type: ignore[attr-defined]


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: Annotated[str, Field(min_length=1, max_length=MAX_URL_LENGTH)]
    events: Annotated[list[EventKind], Field(min_length=1, max_length=len(WEBHOOK_EVENTS))]
    # `slack`: the body is `{"text": ...}`, what Slack's incoming webhooks take.
    format: Literal["json", "slack"] = "json"
    # Every owner's jobs, not only the caller's: admins only.
    all_jobs: bool = False


class WebhookPublic(BaseModel):
    id: str
    url: str
    events: list[str]
    format: str
    all_jobs: bool
    owner: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: Webhook) -> "WebhookPublic":
        return cls(
            id=row.id,
            url=row.url,
            events=list(row.events),
            format=row.format,
            all_jobs=row.all_jobs,
            owner=row.owner,
            created_at=row.created_at,
        )


class WebhookCreated(WebhookPublic):
    # Shown once: it signs every delivery (docs/webhooks.md).
    secret: str


class WebhooksPublic(BaseModel):
    items: list[WebhookPublic]


class DeliveryPublic(BaseModel):
    id: str
    webhook_id: str
    job_id: str
    type: str
    status: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: datetime | None

    @classmethod
    def from_row(cls, row: WebhookDelivery) -> "DeliveryPublic":
        return cls(
            id=row.id,
            webhook_id=row.webhook_id,
            job_id=row.job_id,
            type=row.type,
            status=row.status,
            attempts=row.attempts,
            created_at=row.created_at,
            next_attempt_at=row.next_attempt_at if row.status == "pending" else None,
            last_attempt_at=row.last_attempt_at,
            last_status_code=row.last_status_code,
            last_error=row.last_error,
            delivered_at=row.delivered_at,
        )


class DeliveriesPublic(BaseModel):
    items: list[DeliveryPublic]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=WebhookCreated)
async def create_webhook(
    body: WebhookCreate, session: SessionDep, settings: SettingsDep, principal: CurrentPrincipal
) -> WebhookCreated:
    if body.all_jobs and not principal.is_admin:
        raise Forbidden("only an admin may register a webhook for every owner's jobs")
    try:
        # Resolving the name may wait on DNS: off the event loop.
        await run_in_threadpool(
            resolve_target, body.url, allow_private=settings.webhook_allow_private
        )
    except ForbiddenAddress as exc:
        raise Unprocessable(
            f"webhook URL refused: {exc}", code="forbidden_address", detail={"url": body.url}
        ) from None
    return await run_in_threadpool(_insert_webhook, session, body, principal.name)


def _insert_webhook(session: SessionDep, body: WebhookCreate, owner: str) -> WebhookCreated:
    count = len(session.exec(select(Webhook.id).where(Webhook.owner == owner)).all())
    if count >= MAX_WEBHOOKS_PER_OWNER:
        raise Unprocessable(f"an owner may register at most {MAX_WEBHOOKS_PER_OWNER} webhooks")
    row = Webhook(
        id=new_id(),
        owner=owner,
        url=body.url,
        events=list(dict.fromkeys(body.events)),
        format=body.format,
        all_jobs=body.all_jobs,
        secret=secrets.token_hex(32),
        created_at=utcnow(),
    )
    session.add(row)
    session.commit()
    return WebhookCreated(**WebhookPublic.from_row(row).model_dump(), secret=row.secret)


@router.get("", response_model=WebhooksPublic)
def list_webhooks(session: SessionDep, principal: CurrentPrincipal) -> WebhooksPublic:
    """The caller's webhooks; an admin sees everyone's."""
    stmt = select(Webhook).order_by(col(Webhook.created_at))
    if not principal.is_admin:
        stmt = stmt.where(Webhook.owner == principal.name)
    return WebhooksPublic(items=[WebhookPublic.from_row(r) for r in session.exec(stmt).all()])


def _visible_webhook(session: SessionDep, webhook_id: str, principal: CurrentPrincipal) -> Webhook:
    row = session.get(Webhook, webhook_id) if len(webhook_id) <= 32 else None
    if row is None or not (principal.is_admin or row.owner == principal.name):
        raise NotFound(f"no webhook {webhook_id!r}", detail={"webhook_id": webhook_id})
    return row


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_webhook(webhook_id: str, session: SessionDep, principal: CurrentPrincipal) -> Response:
    """Remove the endpoint; its deliveries, sent or not, go with it."""
    row = _visible_webhook(session, webhook_id, principal)
    session.execute(delete(WebhookDelivery).where(col(WebhookDelivery.webhook_id) == row.id))
    session.execute(delete(Webhook).where(col(Webhook.id) == row.id))
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{webhook_id}/deliveries", response_model=DeliveriesPublic)
def list_deliveries(
    webhook_id: str,
    session: SessionDep,
    principal: CurrentPrincipal,
    job_id: Annotated[str | None, Query(max_length=32)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> DeliveriesPublic:
    """The endpoint's deliveries, newest first (optionally of one job)."""
    hook = _visible_webhook(session, webhook_id, principal)
    stmt = select(WebhookDelivery).where(WebhookDelivery.webhook_id == hook.id)
    if job_id is not None:
        stmt = stmt.where(WebhookDelivery.job_id == job_id)
    stmt = stmt.order_by(
        col(WebhookDelivery.created_at).desc(), col(WebhookDelivery.position).desc()
    )
    rows = session.exec(stmt.limit(limit)).all()
    return DeliveriesPublic(items=[DeliveryPublic.from_row(r) for r in rows])


@router.post(
    "/{webhook_id}/deliveries/{delivery_id}/redeliver",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=DeliveryPublic,
)
def redeliver(
    webhook_id: str, delivery_id: str, session: SessionDep, principal: CurrentPrincipal
) -> DeliveryPublic:
    """Send a delivery again, with the same id and body: due now, retried as a new one."""
    hook = _visible_webhook(session, webhook_id, principal)
    row = session.get(WebhookDelivery, delivery_id) if len(delivery_id) <= 32 else None
    if row is None or row.webhook_id != hook.id:
        raise NotFound(f"no delivery {delivery_id!r}", detail={"delivery_id": delivery_id})
    if row.status == "pending":
        raise Conflict("the delivery is still pending: it is sent, or retried, already")
    session.execute(
        update(WebhookDelivery)
        .where(col(WebhookDelivery.id) == row.id)
        .values(status="pending", next_attempt_at=utcnow(), give_up_at=None, claimed_until=None)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    session.refresh(row)
    return DeliveryPublic.from_row(row)
