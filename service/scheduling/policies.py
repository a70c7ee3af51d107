"""Owners' weights, quotas and priority limits: rows of `owner_policy`, owner `*` being
everyone's default, changed by an admin through /v1/policies and read by every dispatch
pass (no restart). Without any row: weight 1, no quota, `LAUNCHBAY_MAX_USER_PRIORITY`."""

from dataclasses import dataclass, field

from sqlalchemy import Connection, select

from service.models import OwnerPolicy
from service.scheduling.planner import OwnerLimits

DEFAULT_OWNER = "*"


@dataclass(frozen=True)
class Policies:
    default: OwnerLimits = OwnerLimits()
    by_owner: dict[str, OwnerLimits] = field(default_factory=dict)
    max_priority: dict[str, int] = field(default_factory=dict)

    def limits_of(self, owner: str) -> OwnerLimits:
        return self.by_owner.get(owner, self.default)

    def max_priority_of(self, owner: str, fallback: int) -> int:
        if owner in self.max_priority:
            return self.max_priority[owner]
        return self.max_priority.get(DEFAULT_OWNER, fallback)


def limits_from(row: OwnerPolicy) -> OwnerLimits:
    return OwnerLimits(row.weight, row.max_devices, row.max_device_hours)


def load_policies(connection: Connection) -> Policies:
    table = OwnerPolicy.__table__  # type: ignore[attr-defined]
    rows = [OwnerPolicy.model_construct(**r._mapping) for r in connection.execute(select(table))]
    by_owner = {r.owner: limits_from(r) for r in rows if r.owner != DEFAULT_OWNER}
    default = next((limits_from(r) for r in rows if r.owner == DEFAULT_OWNER), OwnerLimits())
    max_priority = {r.owner: r.max_priority for r in rows if r.max_priority is not None}
    return Policies(default, by_owner, max_priority)
