"""The per-owner disk quota (`LAUNCHBAY_OWNER_DISK_QUOTA_BYTES`).

A simple, honest design: the worker measures each job's files (its run directories, with its
working directories and logs, its checkpoints and its artifacts) when an attempt ends
(`worker.disk`) and stores the bytes on the job; a user whose jobs hold the quota or more gets
`403 disk_quota_exceeded` for the next submission, and nothing is stored. Deleting jobs
(`DELETE /v1/jobs/{id}`) frees their share. While a job runs, its worker measures its files
every `worker.disk.DISK_CHECK_S` and stops it (exit reason `user_error`, the message says why)
once they and the owner's other jobs are over the quota.
Admins are exempt, as from the rest of the policy.
"""

from sqlalchemy import func
from sqlmodel import Session, select

from service.auth import Principal
from service.errors import Forbidden
from service.models import Job
from service.settings import Settings


def owner_disk_bytes(session: Session, owner: str) -> int:
    used = session.exec(select(func.sum(Job.disk_bytes)).where(Job.owner == owner)).one()
    return int(used or 0)


def check_disk_quota(session: Session, principal: Principal, settings: Settings) -> None:
    quota = settings.owner_disk_quota_bytes
    if quota is None or principal.is_admin:
        return
    used = owner_disk_bytes(session, principal.name)
    if used >= quota:
        raise Forbidden(
            f"your jobs hold {used} bytes on disk, at or over your quota of {quota} bytes: "
            "delete finished jobs (DELETE /v1/jobs/{id}) to submit more",
            code="disk_quota_exceeded",
            detail={"used_bytes": used, "quota_bytes": quota},
        )
