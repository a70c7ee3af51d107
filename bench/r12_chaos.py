"""R12 (`python -m bench chaos`): the chaos soak of `devstack.chaos`, on SQLite and on
PostgreSQL, each for CHAOS_MINUTES (default 20) with CHAOS_JOBS jobs (default 40): the
dispatcher and two workers, a worker, the API, Redis or a rank SIGKILLed every 20-60 s.

Its goal is a count, not a ratio: 0 jobs stuck, 0 failed other than by their own max_retries,
0 metric gaps or duplicates within a run of the ranks, every checkpoint's download matching its
sha256, 0 orphan processes, the database's integrity check clean."""

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import Result
from devstack.chaos import SoakPlan, run_soak, soak_stack
from devstack.services import postgres_database, postgres_server

GOAL = (
    "0 stuck, 0 failed but by max_retries, 0 gaps or duplicates, every checkpoint verified, "
    "0 orphans, integrity ok"
)


@contextmanager
def database(kind: str) -> Iterator[str | None]:
    if kind == "sqlite":
        yield None
        return
    with postgres_server() as server, postgres_database(server) as url:
        yield url


def run(minutes: float | None = None, jobs: int | None = None) -> list[Result]:
    minutes = minutes or float(os.environ.get("CHAOS_MINUTES", "20"))
    jobs = jobs or int(os.environ.get("CHAOS_JOBS", "40"))
    results = []
    for kind in ("sqlite", "postgresql"):
        plan = SoakPlan(duration_s=60 * minutes, jobs=jobs)
        root = Path(tempfile.mkdtemp(prefix="launchbay-chaos-"))
        with database(kind) as url, soak_stack(root, url) as soak:
            report = run_soak(soak.stack, soak.redis, plan, soak.integrity)
        problems = report.stuck + report.failed + report.gaps + report.duplicates
        problems += report.bad_checkpoints + report.orphans
        results.append(
            Result(
                f"R12 {kind}",
                f"chaos soak: {minutes:g} min, 2 workers, the dispatcher, a fault every 20-60 s",
                report.summary(),
                GOAL,
                report.clean,
                "; ".join(problems)[:2000],
            )
        )
    return results
