"""How often the supervisor's ingestion writes to the database while the ranks run.

A transaction costs the supervisor a few milliseconds of CPU whatever it holds, and that CPU is
taken from ranks that keep every core busy: storing every poll slowed their steps (P1I in
`docs/benchmarks.md`). So the first output is stored at once, and after that what the ranks
write goes in one transaction every `STORE_EVERY_S`, unless an event stream watches the job
(`live`): then every poll stores what it read, for the stream's latency.
"""

import json
from datetime import timedelta
from itertools import pairwise
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, func, select

from jobs.states import AttemptRef
from service.models import Job, LogLine, MetricPoint
from service.models.columns import utcnow
from tests.integration.worker.conftest import WorkerEnv
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

    ingestor.live = True  # a stream watches: every poll stores
    for step in range(POLLS + 2, POLLS + 7):
        write(step)
        assert ingestor.poll()
        assert stored(engine, LogLine) == step
    assert len(commits) == 8


def read_times(wenv: WorkerEnv, job_id: str) -> list[float]:
    """When the supervisor read the job's lines (a line's `ts`), each read once."""
    return sorted({line.ts for line in wenv.logs(job_id) if line.line.startswith("step ")})


def test_a_watched_jobs_supervisor_stores_every_poll_and_an_unwatched_ones_once_a_second(
    wenv: WorkerEnv,
) -> None:
    """The supervisor reads `Job.watched_at` with the job's state (every 0.5 s) and stores what
    the ranks write every poll while a stream watches, once a second while none does."""
    unwatched = wenv.submit("ticker.py", launcher="python", nproc_per_node=1)
    watched = wenv.submit("ticker.py", launcher="python", nproc_per_node=1)
    with Session(wenv.engine) as session:  # as a stream's notifier would, and for the whole run
        job = session.get(Job, watched)
        assert job is not None
        job.watched_at = utcnow() + timedelta(days=1)
        session.add(job)
        session.commit()
    for job_id in (unwatched, watched):
        wenv.run(job_id)
        assert wenv.job(job_id).state == "succeeded"
        assert len([line for line in wenv.logs(job_id) if line.line.startswith("step ")]) == 60

    def gaps(job_id: str) -> list[float]:
        times = read_times(wenv, job_id)
        return [later - earlier for earlier, later in pairwise(times)]

    # Unwatched: a read at least STORE_EVERY_S after the one before, but the last (the final poll).
    assert all(gap >= 0.9 * ingest.STORE_EVERY_S for gap in gaps(unwatched)[:-1])
    # Watched: reads a poll or so apart once the supervisor has read the mark.
    assert sum(gap < 0.5 * ingest.STORE_EVERY_S for gap in gaps(watched)) >= 5
