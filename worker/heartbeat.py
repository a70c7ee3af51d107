"""The heartbeat of one attempt, from a thread of its own.

Every `interval_s` it sets the job's `last_heartbeat` in the database, and its node's for a
node of a multi-node job (only while the job is active at this attempt), and keeps the state
it read back. The reaper reads `last_heartbeat` to find lost attempts. A thread, not a step of the
supervisor loop, so that nothing the loop waits on (a slow checksum of a large checkpoint, the
cancel grace, the final ingestion) lets the reaper take a live attempt for lost.

The supervisor reads `lost` (the job is no longer this attempt's: retried, ended or cancelled
elsewhere, deleted) and `cancelling` (the job's state, the channel a cancel arrives by, as of
the last beat; the supervisor also reads it more often itself).
"""

import logging
import threading

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.states import AttemptRef, JobState
from service.db import session_scope
from service.records import touch_job_heartbeat
from worker.cpu_policy import run_in_batches

log = logging.getLogger(__name__)


class AttemptHeartbeat:
    def __init__(self, engine: Engine, ref: AttemptRef, *, interval_s: float) -> None:
        self.engine, self.ref = engine, ref
        self.interval_s = interval_s
        self.state: JobState | None = JobState.STARTING
        self.lost = False
        self.beats = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{ref.job_id}-{ref.attempt}", daemon=True
        )

    @property
    def cancelling(self) -> bool:
        return self.state is JobState.CANCELLING

    @property
    def native_id(self) -> int | None:
        """The thread's id for the kernel once started (the supervisor leaves its policy be)."""
        return self._thread.native_id

    def start(self) -> "AttemptHeartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        run_in_batches()
        while not self._halt.wait(self.interval_s):
            self.beat()

    def beat(self) -> None:
        """One heartbeat (also called directly by tests)."""
        ref = self.ref
        try:
            with session_scope(self.engine) as session:
                state = touch_job_heartbeat(session, ref.job_id, ref.attempt, ref.node)
        except SQLAlchemyError as exc:
            log.warning("%s: heartbeat to the database failed: %s", ref, exc)
            return
        self.beats += 1
        self.state = state
        if state is None and not self.lost:
            log.warning("%s is no longer the job's to run", ref)
            self.lost = True
