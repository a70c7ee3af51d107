"""The dispatcher's tables (docs/scheduling.md): its lease, the devices it reserved, the owners'
policies."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index
from sqlmodel import Field, SQLModel


class DispatcherLease(SQLModel, table=True):
    """The one row that says which API process dispatches (docs/scheduling.md). `token`, the
    fencing token, grows by one at each takeover; every admission checks it in its own
    transaction, so a dispatcher that lost the lease admits nothing."""

    __tablename__ = "dispatcher_lease"

    id: int = Field(primary_key=True)
    holder: str = Field(max_length=256)
    token: int = Field(sa_type=BigInteger)
    expires_at: datetime


class JobReservation(SQLModel, table=True):
    """Devices of one worker given to one node of an attempt by the dispatcher. Active while
    `released_at` is null; kept afterwards as the owner's usage (device-seconds)."""

    __tablename__ = "job_reservation"
    __table_args__ = (
        Index("ix_job_reservation_released_at", "released_at"),
        Index("ix_job_reservation_owner_admitted_at", "owner", "admitted_at"),
    )

    job_id: str = Field(primary_key=True, max_length=32)
    attempt: int = Field(primary_key=True)
    node: int = Field(primary_key=True)
    owner: str = Field(max_length=128)
    worker: str = Field(max_length=256)
    devices: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # The fencing token of the dispatcher that admitted it.
    token: int = Field(sa_type=BigInteger)
    admitted_at: datetime
    released_at: datetime | None = None


class OwnerPolicy(SQLModel, table=True):
    """An owner's share and limits under the dispatcher; owner `*` is everyone's default.
    Changed by an admin through /v1/policies, read by every dispatch pass."""

    __tablename__ = "owner_policy"

    owner: str = Field(primary_key=True, max_length=128)
    weight: float = 1.0
    max_devices: int | None = None
    max_device_hours: float | None = None
    max_priority: int | None = None
    # `service.scheduling.idle_gpu.IdleGpuPolicy` as JSON, or None.
    idle_gpu: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
