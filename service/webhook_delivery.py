"""The API's webhook delivery loop: sends the outbox (`service.records.webhook_outbox`).

Each API process runs one `WebhookDispatcher` thread. Every `webhook_poll_s` it picks due
deliveries whose earlier deliveries of the same job to the same endpoint are done (per-job
order), claims each with a conditional update (`claimed_until`: whichever process claims it
first sends it; a process that died holding a claim loses it when it lapses), POSTs it and
records the answer. A failure is retried after `webhook_backoff_s`, doubling up to an hour,
until `webhook_retry_for_s` after its first attempt; then it is `failed`. Deliveries are
at least once: a process that dies between the POST and the record sends it again, with the
same `Launchbay-Delivery` id for the receiver to drop the repeat.

The address is checked again before each attempt and the connection goes to the address that
was checked (`service.webhook_addresses`): a name rebound to an internal address since its
registration is refused, not followed. Redirects are not followed either.
"""

import hashlib
import hmac
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import and_, exists, or_, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import aliased
from sqlmodel import Session, col

from service.models import Webhook, WebhookDelivery, utcnow
from service.settings import Settings
from service.webhook_addresses import ForbiddenAddress, WebhookTarget, resolve_target

log = logging.getLogger("launchbay.webhooks")

DELIVERY_HEADER = "Launchbay-Delivery"
SIGNATURE_HEADER = "Launchbay-Signature"
EVENT_HEADER = "Launchbay-Event"
CLAIM_S = 120.0
MAX_BACKOFF_S = 3600.0
BATCH = 16
SENDERS = 4
MAX_ERROR_CHARS = 500


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The `Launchbay-Signature` header: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def as_utc(moment: datetime | None) -> datetime | None:
    """A time read back from the database in UTC (SQLite returns it without a zone)."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


def retry_delay_s(attempts: int, backoff_s: float) -> float:
    """How long after failed attempt number `attempts` (1-based) the next one is due."""
    return float(min(backoff_s * 2 ** max(attempts - 1, 0), MAX_BACKOFF_S))


@dataclass(frozen=True)
class AttemptResult:
    status_code: int | None
    error: str | None
    # Worth trying again (a refused address is not).
    retry: bool = True

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def post_delivery(
    target: WebhookTarget, body: bytes, headers: dict[str, str], timeout_s: float
) -> AttemptResult:
    """POST to the checked address: the URL's host stays in `Host` and in TLS (SNI and the
    certificate check), the connection goes to `target.address`."""
    url = httpx.URL(target.url)
    pinned = url.copy_with(host=target.address)
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    host_header = target.host if url.port is None else f"{target.host}:{url.port}"
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as client:
            request = client.build_request(
                "POST",
                pinned,
                content=body,
                headers={**headers, "Host": host_header},
                extensions=extensions,
            )
            response = client.send(request)
    except httpx.HTTPError as exc:
        return AttemptResult(None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS])
    if 200 <= response.status_code < 300:
        return AttemptResult(response.status_code, None)
    return AttemptResult(
        response.status_code,
        f"HTTP {response.status_code}: {response.text[:MAX_ERROR_CHARS]}",
    )


def due_deliveries(session: Session, now: datetime, limit: int) -> list[WebhookDelivery]:
    """Pending, due and unclaimed deliveries that have no earlier pending delivery of the same
    job to the same endpoint."""
    earlier = aliased(WebhookDelivery)
    blocked = exists().where(
        col(earlier.webhook_id) == col(WebhookDelivery.webhook_id),
        col(earlier.job_id) == col(WebhookDelivery.job_id),
        col(earlier.status) == "pending",
        col(earlier.position) < col(WebhookDelivery.position),
    )
    stmt = (
        select(WebhookDelivery)
        .where(
            col(WebhookDelivery.status) == "pending",
            col(WebhookDelivery.next_attempt_at) <= now,
            or_(
                col(WebhookDelivery.claimed_until).is_(None),
                col(WebhookDelivery.claimed_until) < now,
            ),
            ~blocked,
        )
        .order_by(col(WebhookDelivery.next_attempt_at), col(WebhookDelivery.position))
        .limit(limit)
    )
    return list(session.execute(stmt).scalars().all())


def claim(session: Session, delivery_id: str, now: datetime) -> bool:
    """Take a delivery for `CLAIM_S`; False when another process holds it or it is done."""
    stmt = (
        update(WebhookDelivery)
        .where(
            and_(
                col(WebhookDelivery.id) == delivery_id,
                col(WebhookDelivery.status) == "pending",
                or_(
                    col(WebhookDelivery.claimed_until).is_(None),
                    col(WebhookDelivery.claimed_until) < now,
                ),
            )
        )
        .values(claimed_until=now + timedelta(seconds=CLAIM_S))
        .execution_options(synchronize_session=False)
    )
    claimed = session.execute(stmt).rowcount == 1  # type: ignore[attr-defined]
    session.commit()
    return claimed


class WebhookDispatcher(threading.Thread):
    """The delivery loop of one API process (see the module docstring)."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        super().__init__(name="launchbay-webhooks", daemon=True)
        self.engine, self.settings = engine, settings
        self._stop_event = threading.Event()
        self._senders = ThreadPoolExecutor(SENDERS, thread_name_prefix="launchbay-webhook")

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stop_event.set()
        self.join(timeout_s)
        self._senders.shutdown(wait=True)

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                sent = self.deliver_due()
            except Exception:
                log.exception("webhook delivery round failed")
                sent = 0
            if not sent:
                self._stop_event.wait(self.settings.webhook_poll_s)

    def deliver_due(self) -> int:
        """One round: claim what is due and send it; returns how many were attempted."""
        now = utcnow()
        with Session(self.engine, expire_on_commit=False) as session:
            due = due_deliveries(session, now, BATCH)
            claimed = [d for d in due if claim(session, d.id, now)]
        list(self._senders.map(self.attempt, claimed))
        return len(claimed)

    def attempt(self, delivery: WebhookDelivery) -> None:
        with Session(self.engine, expire_on_commit=False) as session:
            hook = session.get(Webhook, delivery.webhook_id)
        if hook is None:
            result = AttemptResult(None, "the webhook was removed", retry=False)
        else:
            result = self._send(hook, delivery)
        self._record(delivery, result)

    def _send(self, hook: Webhook, delivery: WebhookDelivery) -> AttemptResult:
        try:
            target = resolve_target(hook.url, allow_private=self.settings.webhook_allow_private)
        except ForbiddenAddress as exc:
            return AttemptResult(None, f"refused: {exc}", retry=False)
        body = delivery.body.encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "Launchbay-Webhook/1",
            DELIVERY_HEADER: delivery.id,
            EVENT_HEADER: delivery.type,
            SIGNATURE_HEADER: sign(hook.secret, int(time.time()), body),
        }
        return post_delivery(target, body, headers, self.settings.webhook_timeout_s)

    def _record(self, delivery: WebhookDelivery, result: AttemptResult) -> None:
        now = utcnow()
        attempts = delivery.attempts + 1
        give_up_at = as_utc(delivery.give_up_at) or now + timedelta(
            seconds=self.settings.webhook_retry_for_s
        )
        values: dict[str, object] = {
            "attempts": attempts,
            "last_attempt_at": now,
            "last_status_code": result.status_code,
            "last_error": result.error,
            "claimed_until": None,
            "give_up_at": give_up_at,
        }
        if result.ok:
            values.update(status="delivered", delivered_at=now)
        else:
            due = now + timedelta(seconds=retry_delay_s(attempts, self.settings.webhook_backoff_s))
            if result.retry and due <= give_up_at:
                values.update(next_attempt_at=due)
            else:
                values.update(status="failed")
            log.info(
                "webhook delivery %s: attempt %d failed: %s", delivery.id, attempts, result.error
            )
        with Session(self.engine) as session:
            session.execute(
                update(WebhookDelivery)
                .where(col(WebhookDelivery.id) == delivery.id)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            session.commit()
