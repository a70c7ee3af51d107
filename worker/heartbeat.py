"""The heartbeat of one attempt, from a thread of its own.

Every `interval_s` it sets the job's Redis heartbeat key (a short TTL) and the job's
`last_heartbeat` in the database, and its node's for a node of a multi-node job (only while the
job is active at this attempt), and keeps the state it read back. A thread, not a step of the
supervisor loop, so that nothing the loop waits on (a slow checksum of a large checkpoint, the
cancel grace, the final ingestion) lets the reaper take a live attempt for lost.

The supervisor reads `lost` (the job is no longer this attempt's: retried, ended or cancelled
elsewhere, deleted) and `cancelling` (a cancel whose Redis key may have been lost).
"""

import logging
import threading

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.states import JobState
from service.db import session_scope
from service.queue import heartbeat_key
from service.store import touch_job_heartbeat

log = logging.getLogger(__name__)


class AttemptHeartbeat:
    def __init__(
        self,
        engine: Engine,
        redis: Redis,
        *,
        job_id: str,
        attempt: int,
        worker_name: str,
        interval_s: float,
        node: int | None = None,
    ) -> None:
        self.engine, self.redis = engine, redis
        self.job_id, self.attempt, self.worker_name = job_id, attempt, worker_name
        self.node = node
        self.interval_s = interval_s
        self.state: JobState | None = JobState.STARTING
        self.lost = False
        self.beats = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{job_id}-{attempt}", daemon=True
        )

    @property
    def cancelling(self) -> bool:
        return self.state is JobState.CANCELLING

    def start(self) -> "AttemptHeartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._halt.wait(self.interval_s):
            self.beat()

    def beat(self) -> None:
        """One heartbeat (also called directly by tests)."""
        ttl_s = max(1, int(3 * self.interval_s + 1))
        try:
            self.redis.set(heartbeat_key(self.job_id), self.worker_name, ex=ttl_s)
        except RedisError as exc:
            log.warning("job %s: heartbeat to Redis failed: %s", self.job_id, exc)
        try:
            with session_scope(self.engine) as session:
                state = touch_job_heartbeat(session, self.job_id, self.attempt, self.node)
        except SQLAlchemyError as exc:
            log.warning("job %s: heartbeat to the database failed: %s", self.job_id, exc)
            return
        self.beats += 1
        self.state = state
        if state is None and not self.lost:
            log.warning(
                "job %s: attempt %d is no longer the job's to run", self.job_id, self.attempt
            )
            self.lost = True
