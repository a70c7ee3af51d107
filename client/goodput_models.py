"""The goodput records the API answers (docs/goodput.md), as `client.goodput` returns them."""

from datetime import datetime

from client.models import ApiModel


class GoodputPart(ApiModel):
    name: str
    seconds: float
    device_seconds: float
    detail: str | None = None


class AttemptGoodput(ApiModel):
    attempt: int
    wall_s: float
    device_s: float
    goodput: float
    parts: list[GoodputPart]


class JobGoodput(ApiModel):
    """`GET /v1/jobs/{id}/goodput`: the parts add up to `wall_s`."""

    job_id: str
    final: bool
    wall_s: float
    device_s: float
    goodput: float
    parts: list[GoodputPart]
    attempts: list[AttemptGoodput] = []


class BadputPart(ApiModel):
    name: str
    hours: float
    device_hours: float


class OwnerGoodput(ApiModel):
    owner: str
    jobs: int
    device_hours: float
    trained_device_hours: float
    goodput: float


class JobLoss(ApiModel):
    job_id: str
    name: str
    owner: str
    queue: str
    state: str
    device_hours: float
    trained_device_hours: float
    badput_device_hours: float
    goodput: float


class Goodput(ApiModel):
    """`GET /v1/goodput`: device-hours held and trained, badput by part, who lost most."""

    owner: str | None
    queue: str | None
    since: datetime
    until: datetime
    jobs: int
    wall_hours: float
    device_hours: float
    trained_device_hours: float
    badput_device_hours: float
    goodput: float
    badput: list[BadputPart]
    owners: list[OwnerGoodput]
    lost_most: list[JobLoss]
