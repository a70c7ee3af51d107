"""F4–F8: costs that must not grow with history. The big tables are seeded with bulk inserts
(the store's own batch writes for a job's output, so its rollups are kept as the worker keeps
them; plain INSERTs for job rows), not through the API, then read back through a real API.

- F4: a job page's data (what the dashboard reads before following the stream: the job, its
  timeline, `GET …/metrics?max_points=1000`, `GET …/logs?order=desc&limit=200`) for a job with
  1,000,000 metric points and 500,000 log lines ÷ for a job with 1,000 points (median of
  alternating runs).
- F5/F6: `GET /v1/jobs?state=queued&limit=50` (and the owner, tag and name filters) p50 at
  100,000 jobs ÷ at 1,000, on SQLite and on PostgreSQL.
- F7: the database's bytes per stored log byte (SQLite: pages used; PostgreSQL:
  `pg_total_relation_size('log_line')`).
- F8: PostgreSQL connections held by an idle `launchbay worker` after it ran a job.
"""

import json

from bench.common import Result
from bench.p9_history_lists import LIST_QUERIES, list_growth
from bench.p9_history_output import PAGE_REQUESTS, ingest_cost, job_page, postgres_costs
from devstack.services import postgres_server


def run() -> list[Result]:
    with_rollups, without = ingest_cost()
    medians, per_byte = job_page()
    sq_small, sq_big, sq_plan = list_growth(None)
    with postgres_server() as server:
        pg_small, pg_big, pg_plan = list_growth(server)
        pg_per_byte, held = postgres_costs(server)
    sq_notes = (
        "two stacks side by side, 6 alternating rounds of 25 requests a filter; total "
        f"counted up to 1,000, then marked an estimate; plan: {sq_plan} (was 7.6 at "
        "20,000 jobs)"
    )
    pg_notes = f"same requests; tables ANALYZEd after seeding; plan: {pg_plan}"
    return [
        page_result(medians),
        list_result("F5", "SQLite", sq_small, sq_big, sq_notes),
        list_result("F6", "PostgreSQL", pg_small, pg_big, pg_notes),
        Result(
            "F7",
            "database bytes per stored log byte (82-byte lines)",
            f"SQLite {per_byte:.2f}×, PostgreSQL {pg_per_byte:.2f}×",
            "report",
            None,
            "SQLite: pages used before/after 200,000 lines; PostgreSQL: "
            "pg_total_relation_size('log_line') after 100,000 lines (row, id, job id and 3 "
            "indexes: the per-job log cap bounds it)",
        ),
        Result(
            "F9",
            "metric points/s the store writes (worker batches of 5,000, 20 metrics a step): "
            "with rollups ÷ without",
            f"{with_rollups / without:.2f} ({with_rollups:,.0f} vs {without:,.0f} points/s)",
            "report (P4a: ≥ 5,000 points/s)",
            None,
            "SQLite, 6 alternating runs of 50,000 points, medians; the store alone, in one "
            "process (no worker, no ranks)",
        ),
        Result(
            "F8",
            "PostgreSQL connections an idle `launchbay worker` holds after running a job",
            f"{held}",
            "0 (100 workers + the API's 60 fit under max_connections=100)",
            held == 0,
            "counted from the worker's and its children's TCP sockets to :5432",
        ),
    ]


def page_result(medians: dict[str, dict[str, float]]) -> Result:
    pages = {name: each["page"] for name, each in medians.items()}
    page_ratio = pages["big"] / pages["small"]
    per_request = ", ".join(
        f"{label} {1000 * medians['big'][label]:.1f}/{1000 * medians['small'][label]:.1f} ms"
        for label in PAGE_REQUESTS
    )
    return Result(
        "F4",
        "a job page's data (job, timeline, metrics?max_points=1000, logs?order=desc&"
        "limit=200) for 1,000,000 metric points + 500,000 log lines ÷ for 1,000 points",
        f"{page_ratio:.2f} ({1000 * pages['big']:.1f} vs {1000 * pages['small']:.1f} ms, "
        f"medians of 15); ÷ a job with 1,000 points per metric (4,000, where downsampling "
        f"starts): {pages['big'] / pages['limit']:.2f} ({1000 * pages['limit']:.1f} ms)",
        "≤ 2",
        page_ratio <= 2,
        f"per request, big/small: {per_request}; 4 metrics of 250,000 points each; "
        "SQLite; the page then follows the stream from the seq read (was: the whole "
        "stream replayed, 50.6 s for 524,289 lines)",
    )


def list_result(
    name: str, database: str, small: dict[str, float], big: dict[str, float], notes: str
) -> Result:
    """F5/F6: the state filter's p50 at 100,000 jobs ÷ at 1,000 (the others reported)."""
    ratio = big["state"] / small["state"]
    others = ", ".join(f"{k} {big[k]:.1f}/{small[k]:.1f} ms" for k in LIST_QUERIES if k != "state")
    return Result(
        name,
        f"GET /v1/jobs?state=queued&limit=50 at 100,000 jobs ÷ at 1,000, {database}",
        f"{ratio:.2f} ({big['state']:.1f} vs {small['state']:.1f}"
        f" ms p50; other filters at 100k/1k: {others})",
        "≤ 1.5",
        ratio <= 1.5,
        notes,
    )


if __name__ == "__main__":
    for result in run():
        print(json.dumps(result.__dict__))
