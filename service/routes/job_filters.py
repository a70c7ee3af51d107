"""The filters `GET /v1/jobs` and `GET /v1/runs` share: the query parameters, who may list
whose jobs, and the page of jobs they select."""

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Query
from sqlmodel import Session

from jobs.states import JobState
from service import records
from service.deps import CurrentPrincipal
from service.errors import BadRequest, Forbidden
from service.models import Job
from service.settings import Settings


@dataclass(frozen=True)
class JobFilters:
    """What a listing selects; `owner` is the caller's own name unless an admin asked."""

    state: JobState | None
    name: str | None
    name_contains: str | None
    tags: list[tuple[str, str]]
    owner: str | None

    def page(
        self, session: Session, settings: Settings, limit: int, offset: int
    ) -> tuple[list[Job], int, bool]:
        """The selected jobs, newest first: (rows, total, whether the total is estimated)."""
        return records.list_jobs(
            session,
            owner=self.owner,
            state=self.state,
            limit=limit,
            offset=offset,
            name=self.name,
            tags=self.tags,
            count_limit=settings.job_count_exact_limit,
            name_contains=self.name_contains,
        )


def parse_tag(item: str) -> tuple[str, str]:
    """A `tag` filter, `key=value`."""
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise BadRequest(f"tag {item!r} is not key=value", detail={"tag": item})
    return key, value


def job_filters(
    principal: CurrentPrincipal,
    state: JobState | None = None,
    name: Annotated[str | None, Query(max_length=128, description="Only jobs so named.")] = None,
    name_contains: Annotated[
        str | None,
        Query(max_length=128, description="Only jobs whose name contains this text (any case)."),
    ] = None,
    tag: Annotated[
        list[str] | None,
        Query(max_length=300, description="Only jobs with this tag, `key=value` (repeatable)."),
    ] = None,
    owner: Annotated[
        str | None, Query(max_length=128, description="Only this owner's jobs (admin only).")
    ] = None,
) -> JobFilters:
    if owner is not None and not principal.is_admin and owner != principal.name:
        raise Forbidden("only an admin lists the jobs of other owners", detail={"owner": owner})
    tags = [parse_tag(item) for item in tag or []]
    return JobFilters(
        state, name, name_contains, tags, owner if principal.is_admin else principal.name
    )


JobFiltersDep = Annotated[JobFilters, Depends(job_filters)]
