"""P9 on SQLite: the cost of matching a log search's regular expression with RE2 (the route's
code, `service.records.log_search`, where `jobs.user_regex` compiles the pattern), against the
matcher it replaced, Python's `re` on each line's str, side by side on one database.

SQLite has no index for either: every search scans the job's lines and calls the function
once a line, so the ratio is the per-line cost of RE2 (the pybind11 call, a GIL release, the
match on the stored UTF-8 bytes) against `re` (the line decoded to a str, then matched).
Searched: a pattern found once near the middle (the whole job read), a case-insensitive one
found once, and a frequent one (the first 100 matches: the search stops early). Each latency
is the median of `ROUNDS` runs, the two matchers' turns alternating.
"""

import re
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import func, text
from sqlmodel import Session, col, select

from bench.common import Result
from service.db import make_engine, upgrade_database
from service.models import LogLine
from service.records.log_search import LogQuery, check_query, search_job_logs

LINES = 200_000
ROUNDS = 7
JOB = "s" * 32
NEEDLE = "NCCL watchdog caught collective operation timeout needle-7f3a"
QUERIES = {
    "regex found once": check_query(r"needle-[0-9a-f]{4}$", True),
    "case-insensitive regex found once": check_query(r"(?i)nccl watchdog.*TIMEOUT", True),
    "frequent regex, first 100": check_query(r"loss=[0-9.]+ lr=", True),
}
BASELINE_FUNCTION = "launchbay_regexp_re"


@lru_cache(maxsize=64)
def _python_re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _baseline_match(pattern: str, line: str | None) -> int:
    """The matcher before RE2 (service/records/log_search.py before issue 34), as it was."""
    return int(line is not None and _python_re(pattern).search(line) is not None)


def _fill(session: Session) -> None:
    session.execute(
        text(
            "INSERT INTO job (id, name, state, spec, created_at, attempt, owner, queue, "
            "latest_metrics, last_seq) VALUES (:id, 'bench', 'running', '{}', "
            "datetime('now'), 1, 'bench', 'default', '{}', :last)"
        ),
        {"id": JOB, "last": LINES + 1},
    )
    session.execute(
        text(
            "INSERT INTO log_line (job_id, seq, attempt, rank, node, ts, line) "
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :n) "
            "SELECT :job, n, 1, n % 2, 0, 1.7e9 + n / 100.0, "
            "'step ' || n || ' loss=' || printf('%.4f', abs(random() % 100000) / 10000.0) || "
            "' lr=0.001 throughput=' || abs(random() % 1000) || ' samples/s' FROM g"
        ),
        {"job": JOB, "n": LINES},
    )
    session.execute(
        text("UPDATE log_line SET line = :needle WHERE job_id = :job AND seq = :seq"),
        {"needle": NEEDLE, "job": JOB, "seq": LINES // 2 + 17},
    )
    session.commit()


def _re2_search(session: Session, query: LogQuery) -> list[Any]:
    return search_job_logs(
        session, JOB, query, rank=None, node=None, after=0, limit=100, timeout_s=600
    )


def _baseline_search(session: Session, query: LogQuery) -> list[Any]:
    """The same query with the old matcher, under the same kind of progress handler."""
    raw: Any = session.connection().connection.driver_connection
    raw.create_function(BASELINE_FUNCTION, 2, _baseline_match, deterministic=True)
    deadline = time.monotonic() + 600
    raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        matches = func.launchbay_regexp_re(query.text, col(LogLine.line)) == 1
        stmt = select(LogLine).where(LogLine.job_id == JOB, col(LogLine.seq) > 0, matches)
        return list(session.exec(stmt.order_by(col(LogLine.seq)).limit(100)).all())
    finally:
        raw.set_progress_handler(None, 0)


def _latency(
    session: Session, search: Callable[[Session, LogQuery], list[Any]], q: LogQuery
) -> float:
    began = time.perf_counter()
    rows = search(session, q)
    elapsed = time.perf_counter() - began
    session.rollback()
    assert rows, "the search found nothing"
    return elapsed


def _medians(session: Session) -> dict[tuple[str, str], float]:
    matchers = {"re2": _re2_search, "re": _baseline_search}
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(ROUNDS):
        for name, query in QUERIES.items():
            for matcher, search in matchers.items():
                times.setdefault((name, matcher), []).append(_latency(session, search, query))
    return {key: statistics.median(values) for key, values in times.items()}


def run() -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="launchbay-bench-") as root:
        url = f"sqlite:///{Path(root) / 'launchbay.db'}"
        upgrade_database(url)
        engine = make_engine(url)
        try:
            with Session(engine) as session:
                began = time.perf_counter()
                _fill(session)
                filled_s = time.perf_counter() - began
                medians = _medians(session)
        finally:
            engine.dispose()
    results = []
    for letter, name in zip("def", QUERIES, strict=True):
        new, old = medians[(name, "re2")], medians[(name, "re")]
        results.append(
            Result(
                id=f"P9{letter}",
                what=f"log search, {LINES:,} lines of one job on SQLite: {name}",
                measured=(
                    f"RE2 ÷ Python re {new / old:.2f} ({new * 1000:.1f} ms vs {old * 1000:.1f} ms)"
                ),
                goal="reported",
                met=None,
                notes=f"median of {ROUNDS}, alternating; lines inserted in {filled_s:.1f} s",
            )
        )
    return results
