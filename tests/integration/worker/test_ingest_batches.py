"""How often the supervisor's ingestion writes to the database while the ranks run.

A transaction costs the supervisor a few milliseconds of CPU whatever it holds, and that CPU is
taken from ranks that keep every core busy: storing every poll slowed their steps (P1I in
`docs/benchmarks.md`). So the first output is stored at once, and after that what the ranks
write goes in one transaction every `STORE_EVERY_S`.
"""

import json
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, func, select

from jobs.states import AttemptRef
from service.models import LogLine, MetricPoint
from tests.support.registry import running_job
from worker import ingest
from worker.ingest import Ingestor

POLLS = 25  # a line of each kind before each, many more polls than STORE_EVERY_S allows


def stored(engine: Engine, model: type[LogLine] | type[MetricPoint]) -> int:
    with Session(engine) as session:
        return int(session.exec(select(func.count()).select_from(model)).one())


def test_lines_written_between_polls_are_stored_together_and_the_final_poll_stores_the_rest(
    engine: Engine, tmp_path: Path
) -> None:
    job_id = running_job(engine)
    log_dir, events = tmp_path / "logs", tmp_path / "events.jsonl"
    log_dir.mkdir()
    ingestor = Ingestor(
        engine,
        AttemptRef(job_id, 1),
        log_dir=log_dir,
        events_file=events,
        max_line_bytes=4096,
        on_checkpoint=lambda _: None,
    )
    commits: list[None] = []
    event.listen(engine, "commit", lambda _: commits.append(None))

    def write(step: int) -> None:
        with (log_dir / "rank-0.log").open("a") as rank_log:
            rank_log.write(f"step {step}\n")
        with events.open("a") as out:
            metric = {"type": "metric", "step": step, "metrics": {"loss": 1.0 / step}}
            out.write(json.dumps(metric) + "\n")

    for step in range(1, POLLS + 1):
        write(step)
        assert ingestor.poll()
        if step == 1:  # the first output at once
            assert len(commits) == 1 and stored(engine, LogLine) == 1
    assert len(commits) == 1, "each poll stored what it read"  # the loop takes far below 1 s
    assert ingestor.poll(final=True)
    assert len(commits) == 2
    assert stored(engine, LogLine) == POLLS and stored(engine, MetricPoint) == POLLS

    write(POLLS + 1)
    assert ingestor.poll() and len(commits) == 2  # within STORE_EVERY_S of the last read
    ingestor._next_read -= ingest.STORE_EVERY_S  # as if a second had passed
    assert ingestor.poll() and len(commits) == 3
    assert stored(engine, LogLine) == POLLS + 1
