"""A job's `warnings`: what went wrong without failing it (`worker.outcome_warnings` says what).

Each is kept once, in the order first said, cut to `MAX_WARNING_CHARS`; a job keeps at most
`MAX_WARNINGS` (the last one then says how many more were dropped), so a job that fails and is
retried again and again, or writes whatever it likes into what a warning quotes, cannot grow
its row without bound. A warning of an attempt after the first names it.
"""

from collections.abc import Sequence

from sqlmodel import Session

from jobs.states import ACTIVE_STATES, JobState
from service.records.lifecycle import lock_job

MAX_WARNINGS = 20
MAX_WARNING_CHARS = 500


def merge_warnings(existing: Sequence[str], new: Sequence[str]) -> list[str]:
    """`existing` then what of `new` is not in it yet, within the limits above."""
    kept = [w for w in existing if not w.startswith(_DROPPED_PREFIX)]
    dropped = sum(_dropped_count(w) for w in existing)
    for warning in new:
        text = warning[:MAX_WARNING_CHARS]
        if text in kept:
            continue
        if len(kept) < MAX_WARNINGS - 1:
            kept.append(text)
        else:
            dropped += 1
    if dropped:
        kept.append(f"{_DROPPED_PREFIX}{dropped} more warning(s) not kept")
    return kept


_DROPPED_PREFIX = "... and "


def _dropped_count(warning: str) -> int:
    if not warning.startswith(_DROPPED_PREFIX):
        return 0
    count = warning[len(_DROPPED_PREFIX) :].split(" ", 1)[0]
    return int(count) if count.isdigit() else 0


def add_job_warnings(session: Session, job_id: str, attempt: int, warnings: Sequence[str]) -> bool:
    """Add `warnings` to the job's (not committed), while it is active at `attempt`; False,
    having changed nothing, otherwise."""
    job = lock_job(session, job_id)
    if job is None or job.attempt != attempt or JobState(job.state) not in ACTIVE_STATES:
        return False
    said = [f"attempt {attempt}: {w}" if attempt > 1 else w for w in warnings]
    merged = merge_warnings(job.warnings or [], said)
    if merged != (job.warnings or []):
        job.warnings = merged
        session.add(job)
        session.flush()
    return True
