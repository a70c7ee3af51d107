"""What a job's files take on disk: measured when an attempt ends (`service.quota`), and
sampled while it runs against what its owner's quota leaves it (`DiskWatch`)."""

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import func, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import select

from jobs.contract.data_dir import DataLayout
from service.auth import ADMIN_NAME
from service.db import session_scope
from service.models import ApiToken, Job

log = logging.getLogger(__name__)


def tree_bytes(path: Path) -> int:
    """Allocated bytes of every file under `path`, links not followed."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def job_disk_bytes(data_dir: Path, job_id: str) -> int:
    """The job's run directories (logs, events, its working directories), its checkpoints and
    its artifacts."""
    return sum(tree_bytes(path) for path in DataLayout(data_dir).job_dirs(job_id))


def record_job_disk_use(engine: Engine, job_id: str, data_dir: Path) -> int | None:
    """Measure the job's files (`job_disk_bytes`) and store the bytes on the job."""
    try:
        used = job_disk_bytes(data_dir, job_id)
        with session_scope(engine) as session:
            session.execute(update(Job).where(Job.id == job_id).values(disk_bytes=used))  # type: ignore[arg-type]
            session.commit()
        return used
    except Exception:
        log.warning("job %s: its disk use was not recorded", job_id, exc_info=True)
        return None


# How often a running job's files are measured against its owner's quota: a walk of its
# directories, taken from the ranks' CPU time, so not every poll.
DISK_CHECK_S = 10.0


class DiskWatch:
    """A running job's files against its owner's quota (`Settings.owner_disk_quota_bytes`),
    less what the owner's other jobs hold. `check` says why the job must stop, at most every
    `DISK_CHECK_S`; jobs of an admin are exempt, as their submissions are."""

    def __init__(self, engine: Engine, job_id: str, data_dir: Path, quota: int | None) -> None:
        self.engine, self.job_id, self.data_dir, self.quota = engine, job_id, data_dir, quota
        self.next_check = time.monotonic() + DISK_CHECK_S
        self.exempt = quota is None
        # What the job holds outside its directories, in bytes (its private /dev/shm).
        self.elsewhere: Callable[[], int] | None = None

    def check(self) -> str | None:
        """None, or the message of a job over what its owner's quota leaves it."""
        now = time.monotonic()
        if self.exempt or now < self.next_check or self.quota is None:
            return None
        self.next_check = now + DISK_CHECK_S
        try:
            owner, others = self._owner_and_others()
        except SQLAlchemyError as exc:
            log.warning("job %s: the owner's disk use is unknown: %s", self.job_id, exc)
            return None
        if owner is None:
            self.exempt = True
            return None
        used = job_disk_bytes(self.data_dir, self.job_id)
        used += self.elsewhere() if self.elsewhere is not None else 0
        if used + others <= self.quota:
            return None
        return (
            f"stopped: the job's files took {used} bytes on disk, and with the {others} bytes "
            f"its owner's other jobs hold that is over the owner's disk quota of {self.quota} "
            "bytes (LAUNCHBAY_OWNER_DISK_QUOTA_BYTES): write less, or delete finished jobs "
            "(DELETE /v1/jobs/{id})"
        )

    def _owner_and_others(self) -> tuple[str | None, int]:
        """(the job's owner, None for an admin; the bytes the owner's other jobs hold)."""
        with session_scope(self.engine) as session:
            owner = session.exec(select(Job.owner).where(Job.id == self.job_id)).one()
            admin = (
                owner == ADMIN_NAME
                or session.exec(
                    select(ApiToken.role).where(ApiToken.name == owner, ApiToken.role == "admin")
                ).first()
            )
            if admin:
                return None, 0
            others = session.exec(
                select(func.sum(Job.disk_bytes)).where(Job.owner == owner, Job.id != self.job_id)
            ).one()
        return owner, int(others or 0)
