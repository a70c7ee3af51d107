"""The idle-GPU policy of an owner (`idle_gpu` of `PUT /v1/policies/{owner}`; owner `*` is
everyone's default): when every GPU a job holds stays below `below_percent` utilisation for
`for_s` seconds, `warn` adds a warning to the job (once) and an `idle_gpu` event; `stop` also
stops it, `failed` with exit reason `idle_gpu`. The worker reads the policy of the job's owner
when an attempt starts (`idle_gpu_policy_of`) and judges its samples (`worker.idle_gpu`)."""

import logging
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import Connection, select

from service.models import OwnerPolicy

log = logging.getLogger(__name__)

DEFAULT_OWNER = "*"
# A week: longer than any sensible grace, short enough that a typo of hours for seconds shows.
MAX_FOR_S = 7 * 86400


class IdleGpuPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    below_percent: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)]
    for_s: Annotated[float, Field(gt=0, le=MAX_FOR_S, allow_inf_nan=False)]
    action: Literal["warn", "stop"] = "warn"

    def describe(self) -> str:
        """`every GPU below 5% for 1800 s`."""
        return f"every GPU below {self.below_percent:g}% for {self.for_s:g} s"


def idle_gpu_policy_of(connection: Connection, owner: str) -> IdleGpuPolicy | None:
    """The owner's idle-GPU policy, else everyone's (owner `*`), else None. A stored value
    that no longer validates is logged and ignored."""
    table = OwnerPolicy.__table__  # type: ignore[attr-defined]
    rows = connection.execute(
        select(table.c.owner, table.c.idle_gpu).where(table.c.owner.in_([owner, DEFAULT_OWNER]))
    ).all()
    stored = {row.owner: row.idle_gpu for row in rows if row.idle_gpu is not None}
    value = stored.get(owner, stored.get(DEFAULT_OWNER))
    if value is None:
        return None
    try:
        return IdleGpuPolicy.model_validate(value)
    except ValidationError as exc:
        log.warning("the idle-GPU policy stored for %s is not valid; ignored: %s", owner, exc)
        return None
