"""What a job's `{id}` in a path may be, decided once for every `/v1/jobs/{id}...` route
(through `service.deps`), so the CLI, the SDK and the dashboard all take the same refs:

- the whole id (32 hex characters): a direct lookup by primary key;
- a unique prefix of an id, at least `MIN_PREFIX` hex characters;
- a job's name, when exactly one of the caller's jobs has it;
- `name@N`: the Nth most recent job of that name (`name@1` the newest); `@N` alone: the
  caller's Nth most recent job, whatever its name.

Only jobs the caller may see are candidates (an admin sees every job), so a ref never
finds, nor reveals, another owner's job. A ref that matches several jobs is 409
`ambiguous_id` with the candidates in `detail` (409 and not 404: the jobs exist, and the
answer says how to pick one); one that matches none is 404 `not_found`; a malformed
`@N` (0, negative, past `MAX_NTH`) is 400 `bad_request`.
"""

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlmodel import col, select

from service.auth import Principal
from service.errors import BadRequest, Conflict, NotFound
from service.models import Job
from service.schemas import JobPublic

ID_LENGTH = 32
MIN_PREFIX = 4
# A name is at most 128 characters; `@` and a count come after it.
MAX_REF = 128 + 1 + 7
MAX_NTH = 10_000
# How many candidates an ambiguous ref lists.
MAX_CANDIDATES = 10
CANDIDATE_FIELDS = {"id", "name", "state", "created_at"}
HEX = re.compile(r"[0-9a-fA-F]+")
NTH = re.compile(r"(?P<name>.*)@(?P<nth>[+-]?\d+)")


@dataclass(frozen=True)
class JobRef:
    """A parsed ref: an id, an id prefix and/or a name, or the `nth` job of a name."""

    text: str
    job_id: str | None = None
    prefix: str | None = None
    name: str | None = None
    nth: int | None = None


def whole_id(text: str) -> str | None:
    """`text` as a job's whole id (ids are lower-case hex), or None if it is not one."""
    return text.lower() if len(text) == ID_LENGTH and HEX.fullmatch(text) else None


def parse_job_ref(text: str) -> JobRef:
    """How `text` names a job; NotFound for what can name none, BadRequest for a bad `@N`."""
    if not text or len(text) > MAX_REF or "\x00" in text:
        raise not_found(text)
    if (job_id := whole_id(text)) is not None:
        return JobRef(text, job_id=job_id)
    nth = NTH.fullmatch(text)
    if nth is not None:
        digits = nth["nth"]
        count = int(digits) if len(digits) <= 8 else MAX_NTH + 1
        if not 1 <= count <= MAX_NTH:
            raise BadRequest(
                f"{_shown(text)}: the N of name@N counts from 1 (@1 the newest) to {MAX_NTH}",
                detail={"ref": _shown(text)},
            )
        return JobRef(text, name=nth["name"] or None, nth=count)
    prefix = text.lower() if len(text) >= MIN_PREFIX and HEX.fullmatch(text) else None
    return JobRef(text, prefix=prefix, name=text)


def resolve_job_ref(connection: Connection, text: str, principal: Principal) -> Job:
    """The one job `text` names among those `principal` may see (see the module's rules)."""
    ref = parse_job_ref(text)
    visible = [] if principal.is_admin else [col(Job.owner) == principal.name]
    newest = (col(Job.created_at).desc(), col(Job.id).desc())
    if ref.job_id is not None:
        stmt = select(Job).where(col(Job.id) == ref.job_id, *visible)
        return _one(connection, stmt, ref)
    if ref.nth is not None:
        named = [] if ref.name is None else [col(Job.name) == ref.name]
        stmt = select(Job).where(*named, *visible).order_by(*newest)
        return _one(connection, stmt.offset(ref.nth - 1).limit(1), ref)
    matches = [col(Job.name) == ref.name]
    if ref.prefix is not None:
        # The range lets the primary key's index serve it in any collation (hex digits sort
        # below `g` in all of them); LIKE keeps it exact.
        matches.append(
            (col(Job.id) >= ref.prefix)
            & (col(Job.id) < ref.prefix + "g")
            & col(Job.id).startswith(ref.prefix, autoescape=True)
        )
    stmt = select(Job).where(matches[0] if len(matches) == 1 else matches[0] | matches[1])
    stmt = stmt.where(*visible).order_by(*newest).limit(MAX_CANDIDATES + 1)
    jobs = _jobs(connection, stmt)
    if len(jobs) == 1:
        return jobs[0]
    if not jobs:
        raise not_found(text)
    raise ambiguous(text, jobs)


def _jobs(connection: Connection, stmt: Any) -> list[Job]:
    return [Job.model_construct(**row._mapping) for row in connection.execute(stmt)]


def _one(connection: Connection, stmt: Any, ref: JobRef) -> Job:
    jobs = _jobs(connection, stmt)
    if not jobs:
        raise not_found(ref.text)
    return jobs[0]


def _shown(text: str) -> str:
    """The ref as an answer repeats it: never more than a name's length."""
    return text if len(text) <= 140 else text[:137] + "..."


def not_found(text: str) -> NotFound:
    shown = _shown(text)
    return NotFound(f"no job {shown!r}", detail={"job_id": shown})


def ambiguous(text: str, jobs: list[Job]) -> Conflict:
    """409 `ambiguous_id`: the candidates (newest first), each with what tells them apart."""
    shown = _shown(text)
    candidates = [
        JobPublic.model_validate(job).model_dump(mode="json", include=CANDIDATE_FIELDS)
        for job in jobs[:MAX_CANDIDATES]
    ]
    more = " (and more)" if len(jobs) > MAX_CANDIDATES else ""
    return Conflict(
        f"{shown!r} names {len(candidates)} jobs{more}: give more of the id, or name@N "
        "(name@1 the newest)",
        code="ambiguous_id",
        detail={"ref": shown, "candidates": candidates, "more": len(jobs) > MAX_CANDIDATES},
    )
