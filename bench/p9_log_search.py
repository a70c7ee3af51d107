"""P9: log search among 1,000,000 log lines of one job on PostgreSQL: the latency of
`GET /v1/jobs/{id}/logs?q=`'s query (`service.records.log_search`, the code the route runs) with
the pg_trgm GIN index of migration 0009, against the same query as a plain `LIKE` scan
without the index, side by side on one database.

The lines look like a training log (`step N loss=… lr=… throughput=… samples/s`); one line,
the needle, is an error somewhere in the middle. Searched: the needle (a substring found once),
a regular expression that matches only it, and a frequent substring (first 100 matches).
Each latency is the median of `ROUNDS` runs, the index's turn and the scan's alternating.
"""

import statistics
import time
from collections.abc import Callable

from sqlalchemy import text
from sqlmodel import Session

from bench.common import Result
from devstack.services import postgres_database, postgres_server
from service.db import make_engine, upgrade_database
from service.records.log_search import LogQuery, check_query, search_job_logs

LINES = 1_000_000
ROUNDS = 7
JOB = "b" * 32
NEEDLE = "NCCL watchdog caught collective operation timeout needle-7f3a"
INDEX = "ix_log_line_line_trgm"
QUERIES = {
    "substring found once": check_query("needle-7f3a", False),
    "regex found once": check_query(r"needle-[0-9a-f]{4}$", True),
    "frequent substring, first 100": check_query("samples/s", False),
}


def _fill(session: Session) -> None:
    """The job and its lines (inserted without the index: building it after is faster)."""
    session.execute(
        text(
            "INSERT INTO job (id, name, state, spec, created_at, attempt, owner, queue, "
            "latest_metrics, last_seq) VALUES (:id, 'bench', 'running', '{}', now(), 1, "
            "'bench', 'default', '{}', :last)"
        ),
        {"id": JOB, "last": LINES + 1},
    )
    session.execute(
        text(
            "INSERT INTO log_line (job_id, seq, attempt, rank, node, ts, line) "
            "SELECT :job, g, 1, g % 2, 0, 1.7e9 + g / 100.0, "
            "'step ' || g || ' loss=' || round((random() * 10)::numeric, 4) || "
            "' lr=0.001 throughput=' || (random() * 1000)::int || ' samples/s' "
            "FROM generate_series(1, :n) g"
        ),
        {"job": JOB, "n": LINES},
    )
    session.execute(
        text("UPDATE log_line SET line = :needle WHERE job_id = :job AND seq = :seq"),
        {"needle": NEEDLE, "job": JOB, "seq": LINES // 2 + 17},
    )
    session.commit()


def _latency(session: Session, query: LogQuery) -> float:
    began = time.perf_counter()
    rows = search_job_logs(
        session, JOB, query, rank=None, node=None, after=0, limit=100, timeout_s=600
    )
    elapsed = time.perf_counter() - began
    session.rollback()
    assert rows, "the search found nothing"
    return elapsed


def _medians(session: Session, turn: Callable[[], None]) -> dict[str, float]:
    turn()
    times: dict[str, list[float]] = {name: [] for name in QUERIES}
    for _ in range(ROUNDS):
        for name, query in QUERIES.items():
            times[name].append(_latency(session, query))
    return {name: statistics.median(values) for name, values in times.items()}


def run() -> list[Result]:
    with postgres_server() as server, postgres_database(server) as url:
        upgrade_database(url)
        engine = make_engine(url)
        try:
            with Session(engine) as session:
                session.execute(text(f"DROP INDEX IF EXISTS {INDEX}"))
                session.commit()
                began = time.perf_counter()
                _fill(session)
                session.execute(text("ANALYZE log_line"))
                session.commit()
                filled_s = time.perf_counter() - began
                scan = _medians(session, lambda: None)
                began = time.perf_counter()
                session.execute(
                    text(f"CREATE INDEX {INDEX} ON log_line USING gin (line gin_trgm_ops)")
                )
                session.execute(text("ANALYZE log_line"))
                session.commit()
                index_s = time.perf_counter() - began
                indexed = _medians(session, lambda: None)
        finally:
            engine.dispose()
    results = []
    for letter, name in zip("abc", QUERIES, strict=True):
        ratio = scan[name] / indexed[name]
        results.append(
            Result(
                id=f"P9{letter}",
                what=f"log search, {LINES:,} lines of one job on PostgreSQL: {name}",
                measured=(
                    f"{indexed[name] * 1000:.1f} ms with the pg_trgm index vs "
                    f"{scan[name] * 1000:.1f} ms LIKE/regex scan: {ratio:.1f}× faster"
                ),
                goal="reported",
                met=None,
                notes=(
                    f"median of {ROUNDS}; lines inserted in {filled_s:.0f} s, "
                    f"index built in {index_s:.0f} s"
                ),
            )
        )
    return results
