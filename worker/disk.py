"""What a job's files take on disk, measured when an attempt ends (`service.quota`)."""

import logging
import os
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.engine import Engine

from service.db import session_scope
from service.models import Job

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


def record_job_disk_use(engine: Engine, job_id: str, data_dir: Path) -> int | None:
    """Measure the job's run directories and checkpoints and store the bytes on the job."""
    try:
        used = tree_bytes(data_dir / "runs" / job_id) + tree_bytes(
            data_dir / "checkpoints" / job_id
        )
        with session_scope(engine) as session:
            session.execute(update(Job).where(Job.id == job_id).values(disk_bytes=used))  # type: ignore[arg-type]
            session.commit()
        return used
    except Exception:
        log.warning("job %s: its disk use was not recorded", job_id, exc_info=True)
        return None
