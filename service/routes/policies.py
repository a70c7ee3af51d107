"""Owners' scheduling policies (admin only): weight, quotas, highest priority, idle GPUs. Owner
`*` is everyone's default. The dispatcher reads them at each pass: a change holds at once; the
idle-GPU policy holds from each attempt that starts after the change."""

from typing import Annotated

from fastapi import APIRouter, Path, Response, status
from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import col, select

from service import auth
from service.deps import AdminPrincipal, SessionDep
from service.errors import NotFound
from service.models import OwnerPolicy
from service.scheduling.idle_gpu import IdleGpuPolicy

router = APIRouter(prefix="/v1/policies", tags=["scheduling"])
OWNER_PATTERN = rf"^(\*|{auth.TOKEN_NAME_PATTERN.strip('^$')})$"


class PolicyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weight: Annotated[float, Field(gt=0, le=1e6)] = 1.0
    max_devices: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    max_device_hours: Annotated[float, Field(ge=0, le=1e9)] | None = None
    max_priority: Annotated[int, Field(ge=-1000, le=1000)] | None = None
    # `{"below_percent", "for_s", "action": "warn" | "stop"}` (service/scheduling/idle_gpu.py)
    idle_gpu: IdleGpuPolicy | None = None


class PolicyPublic(PolicyBody):
    owner: str


class PoliciesPublic(BaseModel):
    items: list[PolicyPublic]


def _public(row: OwnerPolicy) -> PolicyPublic:
    return PolicyPublic(
        owner=row.owner,
        weight=row.weight,
        max_devices=row.max_devices,
        max_device_hours=row.max_device_hours,
        max_priority=row.max_priority,
        idle_gpu=None if row.idle_gpu is None else IdleGpuPolicy.model_validate(row.idle_gpu),
    )


OwnerPath = Annotated[str, Path(pattern=OWNER_PATTERN, max_length=128)]


@router.get("", response_model=PoliciesPublic)
def list_policies(session: SessionDep, _: AdminPrincipal) -> PoliciesPublic:
    rows = session.exec(select(OwnerPolicy).order_by(col(OwnerPolicy.owner))).all()
    return PoliciesPublic(items=[_public(r) for r in rows])


@router.put("/{owner}", response_model=PolicyPublic)
def put_policy(
    owner: OwnerPath, body: PolicyBody, session: SessionDep, _: AdminPrincipal
) -> PolicyPublic:
    row = session.get(OwnerPolicy, owner) or OwnerPolicy(owner=owner)
    for name, value in body.model_dump().items():
        setattr(row, name, value)
    session.add(row)
    session.commit()
    return _public(row)


@router.delete("/{owner}", status_code=status.HTTP_204_NO_CONTENT)
def delete_policy(owner: OwnerPath, session: SessionDep, _: AdminPrincipal) -> Response:
    row = session.get(OwnerPolicy, owner)
    if row is None:
        raise NotFound(f"no policy for {owner!r}", detail={"owner": owner})
    session.delete(row)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
