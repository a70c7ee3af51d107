"""The attempt's side of a job's own environment (worker/environment.py): what the job asks
for, the `starting` message while it builds, the build's output as the job's log lines, and an
`environment` event with the time it took."""

import logging
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.spec import JobSpec
from jobs.states import JobState
from service.db import session_scope
from service.models import Job
from service.records import AttemptSuperseded, NewLogLine, add_attempt_event, append_output
from service.settings import Settings
from worker.environment import (
    Environment,
    EnvironmentCache,
    EnvironmentProblem,
    Sources,
    job_requirements,
)
from worker.launch import RunPaths

log = logging.getLogger(__name__)
BUILDING = "building environment"


def requested(spec: JobSpec, code_store: Path) -> list[str]:
    """The job's requirements (none: it runs with the worker's own interpreter)."""
    code_dir: Path | None = None
    if spec.code is not None and (code_store / spec.code.code_id).is_dir():
        code_dir = code_store / spec.code.code_id
    env = spec.environment
    try:
        return job_requirements(
            env.requirements if env else [], env.requirements_file if env else None, code_dir
        )
    except ValueError as exc:
        raise EnvironmentProblem(str(exc)) from None


def cache_for(settings: Settings) -> EnvironmentCache:
    sources = Sources(
        settings.pip_index_url, tuple(settings.pip_find_links), settings.pip_allow_builds
    )
    return EnvironmentCache(settings.envs_dir, settings.env_cache_bytes, sources)


def prepare_environment(
    engine: Engine,
    settings: Settings,
    spec: JobSpec,
    *,
    job_id: str,
    attempt: int,
    paths: RunPaths,
    node: int | None,
) -> Environment | None:
    """The job's environment, built (or found in the cache) while the job says so; None when
    the job asks for no packages. EnvironmentProblem when it cannot be built."""
    requirements = requested(spec, settings.code_dir)
    if not requirements:
        return None
    _say(engine, job_id, attempt, BUILDING)

    def store(lines: list[str]) -> None:
        now = time.time()
        logs = [NewLogLine(rank=0, ts=now, line=line, node=node or 0) for line in lines]
        try:
            with session_scope(engine) as session:
                append_output(
                    session,
                    job_id,
                    attempt,
                    logs=logs,
                    max_log_bytes=settings.max_log_bytes_per_job,
                )
        except (AttemptSuperseded, SQLAlchemyError) as exc:
            log.warning("job %s: environment output not stored: %s", job_id, exc)

    output = JobOutput(store, paths.log_dir / "environment.log")
    try:
        output(f"{len(requirements)} requirement(s): {', '.join(requirements)}")
        environment = cache_for(settings).prepare(requirements, output)
        how = "cached" if environment.cached else "built"
        output(f"ready in {environment.seconds:.2f} s ({how}, {environment.key})")
    except EnvironmentProblem as exc:
        output(f"failed: {exc}")
        raise
    finally:
        output.close()
    _event(engine, job_id, attempt, environment)
    _say(engine, job_id, attempt, None)
    return environment


def _say(engine: Engine, job_id: str, attempt: int, message: str | None) -> None:
    """The message of a job still `starting` at this attempt."""
    try:
        with session_scope(engine) as session:
            session.execute(
                update(Job)
                .where(
                    Job.id == job_id,  # type: ignore[arg-type]
                    Job.attempt == attempt,  # type: ignore[arg-type]
                    Job.state == str(JobState.STARTING),  # type: ignore[arg-type]
                )
                .values(message=message)
            )
            session.commit()
    except SQLAlchemyError as exc:
        log.warning("job %s: message not set: %s", job_id, exc)


def _event(engine: Engine, job_id: str, attempt: int, environment: Environment) -> None:
    data: dict[str, object] = {
        "seconds": round(environment.seconds, 3),
        "cached": environment.cached,
        "key": environment.key,
        "size": environment.size,
    }
    try:
        with session_scope(engine) as session:
            add_attempt_event(session, job_id, "environment", attempt, data)
    except (AttemptSuperseded, SQLAlchemyError) as exc:
        log.warning("job %s: environment event not recorded: %s", job_id, exc)


class JobOutput:
    """The build's output as rank 0's log lines of the attempt (stored every `flush_s`, so
    `launchbay logs -f` and the event stream show it as it happens) and in
    ``logs/environment.log``."""

    def __init__(
        self,
        store: Callable[[list[str]], None],
        log_file: Path,
        flush_s: float = 0.5,
    ) -> None:
        self.store = store
        self.flush_s = flush_s
        self.pending: list[str] = []
        self.flushed_at = time.monotonic()
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(log_file, "a", encoding="utf-8")  # noqa: SIM115 (closed in close)

    def __call__(self, line: str) -> None:
        self.file.write(line + "\n")
        self.file.flush()
        self.pending.append(f"[environment] {line}")
        if time.monotonic() - self.flushed_at >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        lines, self.pending = self.pending, []
        self.flushed_at = time.monotonic()
        if lines:
            self.store(lines)

    def close(self) -> None:
        self.flush()
        self.file.close()
