"""What an owner's uploads take, and taking them back.

Each owner may keep `LAUNCHBAY_CODE_QUOTA_BYTES` of uploads (their sizes as sent) that unpack
to at most `LAUNCHBAY_CODE_QUOTA_UNPACKED_BYTES`, and send `LAUNCHBAY_UPLOADS_PER_MINUTE`
uploads a minute. The same bytes sent by two owners count for each (each may delete theirs);
sending one's own upload again costs nothing. Two uploads of one owner at the same moment
are both checked against what was stored before them, so together they may pass the quota by
one upload.

`DELETE /v1/code/{code_id}` removes the caller's record of an upload (every owner's, for an
admin); the files go when no record is left. It is refused while a job that is not finished
(queued, starting, running, cancelling) runs that code: one of the caller's, or any job when
the files would go.
"""

import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from redis import Redis
from sqlalchemy import func
from sqlmodel import Session, col, select

from jobs.states import TERMINAL_STATES
from service import policy
from service.auth import Principal
from service.errors import Conflict, NotFound, PayloadTooLarge
from service.models import CodeUpload, Job

CODE_ID = re.compile(r"[0-9a-f]{64}")  # a sha256; anything else (a NUL...) is no upload
UPLOAD_RATE_KEY = "launchbay:rate:upload:{owner}:{window}"
DELETE_PREFIX = ".delete-"


@dataclass(frozen=True)
class CodeUsage:
    stored_bytes: int
    unpacked_bytes: int


def owner_usage(session: Session, owner: str) -> CodeUsage:
    row = session.exec(
        select(
            func.coalesce(func.sum(CodeUpload.size), 0),
            func.coalesce(func.sum(CodeUpload.unpacked_size), 0),
        ).where(CodeUpload.owner == owner)
    ).one()
    return CodeUsage(stored_bytes=int(row[0]), unpacked_bytes=int(row[1]))


def check_stored_quota(usage: CodeUsage, size: int, quota: int) -> None:
    """413 `quota_exceeded` when `size` more uploaded bytes would pass the owner's quota."""
    if usage.stored_bytes + size > quota:
        left = max(quota - usage.stored_bytes, 0)
        raise PayloadTooLarge(
            f"this upload ({size} bytes) is larger than the {left} bytes left of your quota "
            f"of {quota} bytes of uploaded code; delete uploads you no longer need "
            "(DELETE /v1/code/{code_id})",
            code="quota_exceeded",
            detail={"quota": "code_quota_bytes", "limit_bytes": quota, "left_bytes": left},
        )


def check_upload_rate(redis: Redis, owner: str, per_minute: int) -> None:
    """429 past `per_minute` uploads of `owner` in this minute (0: no limit)."""
    policy.check_rate(redis, UPLOAD_RATE_KEY, owner, per_minute, what="code uploads")


def jobs_using(session: Session, code_id: str, owners: set[str] | None) -> list[str]:
    """Ids of the unfinished jobs (of `owners`; of anyone when None) that run `code_id`."""
    stmt = select(Job.id, Job.spec).where(col(Job.state).not_in([str(s) for s in TERMINAL_STATES]))
    if owners is not None:
        stmt = stmt.where(col(Job.owner).in_(sorted(owners)))
    using = []
    for job_id, spec in session.exec(stmt):
        code = (spec or {}).get("code") or {}
        if isinstance(code, dict) and code.get("code_id") == code_id:
            using.append(job_id)
    return sorted(using)


def codes_in_use(session: Session, owner: str) -> set[str]:
    """The code ids that `owner`'s unfinished jobs run."""
    stmt = select(Job.spec).where(
        col(Job.state).not_in([str(s) for s in TERMINAL_STATES]), col(Job.owner) == owner
    )
    used = set()
    for spec in session.exec(stmt):
        code = (spec or {}).get("code") or {}
        if isinstance(code, dict) and isinstance(code.get("code_id"), str):
            used.add(code["code_id"])
    return used


def delete_upload(session: Session, code_dir: Path, code_id: str, principal: Principal) -> None:
    """Remove the caller's record of `code_id` (every record, for an admin), and its files
    when no record is left. 404 when the caller has none; 409 while a job runs it."""
    if not CODE_ID.fullmatch(code_id):
        raise NotFound(f"no uploaded code {code_id[:64]!r}")
    stmt = select(CodeUpload).where(CodeUpload.code_id == code_id)
    if not principal.is_admin:
        stmt = stmt.where(CodeUpload.owner == principal.name)
    rows = list(session.exec(stmt))
    if not rows:
        raise NotFound(f"no uploaded code {code_id}")
    others = session.exec(
        select(func.count())
        .select_from(CodeUpload)
        .where(
            CodeUpload.code_id == code_id,
            col(CodeUpload.owner).not_in([r.owner for r in rows]),
        )
    ).one()
    files_go = int(others) == 0
    using = jobs_using(session, code_id, None if files_go else {r.owner for r in rows})
    if using:
        shown = ", ".join(using[:10]) + (" ..." if len(using) > 10 else "")
        raise Conflict(
            f"code {code_id} is used by jobs that have not finished ({shown}); cancel them or "
            "wait for them to end",
            code="code_in_use",
            detail={"jobs": using[:100]},
        )
    for row in rows:
        session.delete(row)
    session.commit()
    if files_go:
        remove_code_dir(code_dir, code_id)


def remove_code_dir(code_dir: Path, code_id: str) -> None:
    """Rename the code's directory out of the way (so no job finds it half removed), then
    remove it."""
    source = code_dir / code_id
    doomed = code_dir / f"{DELETE_PREFIX}{uuid.uuid4().hex}"
    try:
        os.rename(source, doomed)
    except FileNotFoundError:
        return
    shutil.rmtree(doomed, ignore_errors=True)
