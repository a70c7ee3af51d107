"""F4 side by side with an earlier tree: `python -m bench.p9_history_compare OLD_TREE [ROUNDS]`.

One SQLite database is seeded by this tree (the big, small and at-the-limit jobs of
`bench.p9_history_output.job_page`) and copied; the copy is migrated down to OLD_REVISION (the
earlier tree's head) and both files are vacuumed, so the two hold the same rows in the same
layout. Two APIs run side by side, this tree's on the original and OLD_TREE's (its code first
on PYTHONPATH) on the copy; their page requests alternate, the order swapped every round.
Prints whether the two answer each job's `…/metrics?max_points=1000` with the same bytes and
the median milliseconds of each request and of the whole page, as JSON.
"""

import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from alembic import command
from alembic.config import Config

from bench.common import MARKER
from bench.p9_history_output import BIG_LINES, BIG_POINTS, page_seconds, running_job, seed_output
from devstack.services import private_redis
from devstack.stack import Stack
from service.db import MIGRATIONS_DIR, make_engine, upgrade_database

OLD_REVISION = "0013"
WARM_UP = 3
Times = dict[str, dict[str, dict[str, list[float]]]]


def seeded(root: Path) -> tuple[Path, Path, dict[str, str]]:
    """This tree's database and its copy at OLD_REVISION, both vacuumed; the jobs' ids."""
    new_db, old_db = root / "new" / "data" / "launchbay.db", root / "old" / "data" / "launchbay.db"
    for db in (new_db, old_db):
        db.parent.mkdir(parents=True)
    upgrade_database(f"sqlite:///{new_db}")
    engine = make_engine(f"sqlite:///{new_db}")
    jobs = {"small": running_job(engine, "small"), "limit": running_job(engine, "limit")}
    seed_output(engine, jobs["small"], points=1000, lines=1000)
    seed_output(engine, jobs["limit"], points=4000, lines=1000)
    jobs["big"] = running_job(engine, "big")
    seed_output(engine, jobs["big"], points=BIG_POINTS, lines=BIG_LINES)
    engine.dispose()
    _sqlite(new_db, "PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(new_db, old_db)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", f"sqlite:///{old_db}")
    command.downgrade(config, OLD_REVISION)
    for db in (new_db, old_db):
        _sqlite(db, "VACUUM")
    return new_db, old_db, jobs


def _sqlite(path: Path, sql: str) -> None:
    connection = sqlite3.connect(path)
    try:
        connection.execute(sql)
    finally:
        connection.close()


def alternate(clients: dict[str, httpx.Client], jobs: dict[str, str], rounds: int) -> Times:
    times: Times = {which: {} for which in clients}
    for round_ in range(rounds + WARM_UP):
        order = list(clients) if round_ % 2 else list(reversed(clients))
        for which in order:
            for name, job_id in jobs.items():
                took = page_seconds(clients[which], job_id)
                if round_ < WARM_UP:
                    continue
                for label, seconds in {**took, "page": sum(took.values())}.items():
                    times[which].setdefault(name, {}).setdefault(label, []).append(seconds)
    return times


def compare(old_tree: Path, rounds: int) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="launchbay-bench-compare-"))
    try:
        began = time.monotonic()
        new_db, old_db, jobs = seeded(root)
        seed_s = time.monotonic() - began
        env = {"LAUNCHBAY_SUBMISSIONS_PER_MINUTE": "0", "LAUNCHBAY_REAPER_ENABLED": "0"}
        with private_redis() as redis:
            stacks = {
                "new": Stack(root / "new", f"sqlite:///{new_db}", redis.url(1), MARKER, env),
                "old": Stack(
                    root / "old",
                    f"sqlite:///{old_db}",
                    redis.url(2),
                    MARKER,
                    {**env, "PYTHONPATH": str(old_tree)},
                ),
            }
            try:
                for stack in stacks.values():
                    stack.start_api()
                clients = {which: stack.client() for which, stack in stacks.items()}
                bodies = {
                    which: {
                        name: http.get(f"/v1/jobs/{job_id}/metrics", params={"max_points": 1000})
                        for name, job_id in jobs.items()
                    }
                    for which, http in clients.items()
                }
                times = alternate(clients, jobs, rounds)
            finally:
                for stack in stacks.values():
                    stack.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "seed_s": round(seed_s),
        "same_bytes": {n: bodies["old"][n].content == bodies["new"][n].content for n in jobs},
        "points": {n: len(bodies["new"][n].json()["items"]) for n in jobs},
        "median_ms": {
            which: {
                name: {label: round(1000 * statistics.median(t), 1) for label, t in each.items()}
                for name, each in by_job.items()
            }
            for which, by_job in times.items()
        },
    }


if __name__ == "__main__":
    print(json.dumps(compare(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 15)))
