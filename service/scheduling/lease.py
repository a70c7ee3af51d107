"""The dispatcher's leader lease: one row (`dispatcher_lease`, id 1) naming the API process
that dispatches until `expires_at`. Taking it over (only once it has expired) adds one to its
fencing `token`; every admission checks, in its own transaction, that the row still holds the
token it was taken with (`fence`), so a dispatcher that paused past its lease and lost it
admits nothing. On PostgreSQL the check's UPDATE locks the row until the admission commits,
so a takeover waits for it; SQLite has one writer at a time."""

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from service.models import DispatcherLease, utcnow

LEASE_ID = 1
_table = DispatcherLease.__table__  # type: ignore[attr-defined]


def new_holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Lease:
    holder: str
    token: int


class LeaseLost(Exception):
    """The lease was taken over: whatever this dispatcher planned is not to be admitted."""


def take_lease(
    connection: Connection, holder: str, ttl_s: float, now: datetime | None = None
) -> Lease | None:
    """Renew the lease we hold, or take it over once it has expired (a new token); None while
    another holds it. Commit the connection's transaction after."""
    now = now or utcnow()
    expires = now + timedelta(seconds=ttl_s)
    row = connection.execute(select(_table).where(_table.c.id == LEASE_ID)).first()
    if row is None:
        try:
            with connection.begin_nested():
                connection.execute(
                    insert(_table).values(id=LEASE_ID, holder=holder, token=1, expires_at=expires)
                )
            return Lease(holder, 1)
        except IntegrityError:
            row = connection.execute(select(_table).where(_table.c.id == LEASE_ID)).first()
            assert row is not None
    if row.holder == holder:
        renewed = connection.execute(
            update(_table)
            .where(_table.c.id == LEASE_ID, _table.c.holder == holder, _table.c.token == row.token)
            .values(expires_at=expires)
        )
        return Lease(holder, row.token) if renewed.rowcount == 1 else None
    taken = connection.execute(
        update(_table)
        .where(_table.c.id == LEASE_ID, _table.c.token == row.token, _table.c.expires_at < now)
        .values(holder=holder, token=row.token + 1, expires_at=expires)
    )
    return Lease(holder, row.token + 1) if taken.rowcount == 1 else None


def fence(connection: Connection, lease: Lease, ttl_s: float) -> None:
    """In the admission's transaction: renew the lease if it is still ours with our token,
    else raise `LeaseLost` (the caller rolls back)."""
    renewed = connection.execute(
        update(_table)
        .where(
            _table.c.id == LEASE_ID,
            _table.c.holder == lease.holder,
            _table.c.token == lease.token,
        )
        .values(expires_at=utcnow() + timedelta(seconds=ttl_s))
    )
    if renewed.rowcount != 1:
        raise LeaseLost(f"the dispatcher lease (token {lease.token}) was taken over")


def release_lease(connection: Connection, lease: Lease) -> None:
    """Give the lease up at shutdown, so another process takes over at once."""
    connection.execute(
        update(_table)
        .where(
            _table.c.id == LEASE_ID, _table.c.holder == lease.holder, _table.c.token == lease.token
        )
        .values(expires_at=datetime(1970, 1, 1, tzinfo=utcnow().tzinfo))
    )


def current_lease(connection: Connection) -> tuple[str, int, datetime] | None:
    row = connection.execute(select(_table).where(_table.c.id == LEASE_ID)).first()
    return None if row is None else (row.holder, row.token, row.expires_at)
