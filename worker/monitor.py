"""The supervisor loop of one attempt: watch the launched processes until they end or must
be stopped, ingesting what they write as they go.

Every `Settings.worker_poll_s`:

    record new processes -> ingest logs, events, checkpoints -> starting→running once the
    ranks are up -> note elastic restarts -> launcher exited? -> worker shutdown / job no
    longer ours / timeout / hang / cancel / idle GPUs?

The ranks start warm or cold (`worker.warm_start`). The attempt's heartbeat runs beside the
loop (`worker.heartbeat`); what it reads back (the job taken away, or cancelling) is one of the
reasons to stop; for a job that holds GPUs, so is the idle-GPU verdict of the watch of its GPUs
beside it (`worker.gpu_watch`). A cancel arrives by one channel: the job's `cancelling` state,
which the loop also reads itself every `CANCEL_CHECK_S`.

Whatever ends the loop, every process of the job is stopped before it returns (a cancelled
job is `cancelled` only once nothing of it runs). Each database write is a short session of
its own; none is open while the ranks run.
"""

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.spec import JobSpec
from jobs.states import AttemptRef, ExitReason, JobState
from service.db import session_scope
from service.records import (
    AttemptSuperseded,
    add_attempt_event,
    mark_node_running,
    read_job_signals,
    transition_job,
)
from service.scheduling.preemption import preemption_of
from service.settings import Settings
from worker.cgroups import JobCgroup, cgroup_name
from worker.checkpoints import CheckpointRegistrar
from worker.cpu_policy import yield_cpu_to_ranks
from worker.db_retry import retry_db
from worker.disk import DiskWatch
from worker.goodput_marks import AttemptMarker
from worker.gpu_watch import GpuWatch, gpu_watch_for
from worker.heartbeat import AttemptHeartbeat
from worker.ingest import Ingestor
from worker.isolation import JobUser
from worker.launch import LaunchPlan, Rendezvous, RunPaths
from worker.launch_path import NOT_WARM, LaunchChoice
from worker.outcome import Outcome, classify_exit, read_oom_kills
from worker.outcome_warnings import AttemptFacts, attempt_notes, collect_warnings, reported_count
from worker.outputs import DeclaredOutputs, wants_declared_outputs
from worker.process_tree import (
    ProcessTree,
    elastic_restart_count,
    shutdown_requested,
    stop_job_processes,
)
from worker.scratch import shm_bytes
from worker.stacks import record_rank_stacks
from worker.stops import FAILING_STOPS, StopOutcomes, StopReason
from worker.warm_pool import WarmPool
from worker.warm_start import record_launch, start_ranks

log = logging.getLogger(__name__)

PROCESS_SCAN_S = 5.0
# How often the job's state is read for a cancel: each read is a database round trip, taken
# from the ranks' CPU time on a busy node, so not every poll.
CANCEL_CHECK_S = 0.5


class AttemptMonitor:
    """Runs one launch plan to its end (see the module docstring). `owner`: whose idle-GPU
    policy judges the GPUs the job holds (`worker.gpu_watch`)."""

    gpu_watch: GpuWatch | None = None

    # long: the attempt's parts, each made once, read best in one place
    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        ref: AttemptRef,
        *,
        spec: JobSpec,
        plan: LaunchPlan,
        paths: RunPaths,
        worker_name: str,
        heartbeat: AttemptHeartbeat,
        rendezvous: Rendezvous | None = None,
        announce: Callable[[Outcome], None] | None = None,
        job_user: JobUser | None = None,
        launch: LaunchChoice = NOT_WARM,
        warm_pool: WarmPool | None = None,
        owner: str | None = None,
    ) -> None:
        """`rendezvous` (with `announce`) for a node of a multi-node job: `announce` is called
        with the outcome of a failing stop before the processes are stopped, so the attempt
        ends with this cause rather than with what the other nodes' ranks see next."""
        self.engine, self.settings = engine, settings
        self.job_user, self.launch, self.warm_pool = job_user, launch, warm_pool
        self.owner = owner
        self.heartbeat = heartbeat
        self.ref, self.spec = ref, spec
        self.job_id, self.attempt = ref.job_id, ref.attempt
        self.plan, self.paths, self.worker_name = plan, paths, worker_name
        self.node = rendezvous.node if rendezvous is not None else None
        self.rendezvous_timeout_s = rendezvous.timeout_s if rendezvous is not None else None
        self.announce = announce
        self.stop_outcomes = StopOutcomes(spec, worker_name, self.rendezvous_timeout_s)
        job_uid = None if job_user is None else job_user.uid
        self.registrar = CheckpointRegistrar.for_attempt(
            engine, settings, ref, paths, job_uid, spec.checkpoint
        )
        self.declared = None
        if wants_declared_outputs(spec) and spec.outputs is not None:
            declared = spec.outputs.checkpoints
            self.declared = DeclaredOutputs(paths.work_dir, declared, self.registrar)
        self.started_wall = time.time()  # its goodput marks and requests for stacks start
        self.marker = AttemptMarker(self.started_wall)
        self.registrar.on_registered = self.marker.registered
        self.hang_since: float | None = None
        self.ingestor = Ingestor(
            engine,
            ref,
            log_dir=paths.log_dir,
            events_file=paths.events_file,
            max_line_bytes=settings.max_log_line_bytes,
            on_checkpoint=self.registrar.add,
            max_log_bytes=settings.max_log_bytes_per_job,
            log_metrics=spec.log_metrics if spec.capture == "auto" else (),
            marker=self.marker,
        )
        self.disk = DiskWatch(engine, ref.job_id, paths.data_dir, settings.owner_disk_quota_bytes)
        self.over_disk: str | None = None
        self.running = False
        self.restarts = 0
        self.next_cancel_check = 0.0
        self.tree: ProcessTree | None = None
        self.survivors: list[int] = []
        self.stacks_requested_at: datetime | None = None
        self.stacks_served: datetime | None = None

    # long: the attempt in the order it happens: start, watch, stop everything, classify
    def run(self) -> tuple[Outcome | None, list[int]]:
        """(the outcome, or None when the job was taken away; PIDs that outlived SIGKILL)."""
        oom_before = read_oom_kills()
        cgroup = JobCgroup.create(
            cgroup_name(self.job_id, self.attempt, self.node),
            memory_limit_bytes=self.spec.memory_limit_bytes,
            pids_max=self.settings.job_pids_max,
        )
        user, shm_size = self.job_user, self.spec.memory_limit_bytes
        scratch = None if user is None else user.scratch(self.plan.cwd, shm_size)
        try:
            tree, self.launch = start_ranks(
                self.plan,
                self.launch,
                self.warm_pool,
                self.paths.launcher_log,
                self.paths.pids_file,
                cgroup,
                user=None if user is None else (user.uid, user.gid),
                scratch=scratch,
            )
            self.tree = tree
        except OSError as exc:
            if cgroup is not None:
                cgroup.remove()
            return Outcome(
                JobState.FAILED, ExitReason.LAUNCH_ERROR, None, f"cannot start: {exc}"
            ), []
        launched = self.launch
        retry_db(lambda: record_launch(self.engine, self.ref, launched), "launch path", tries=2)
        if scratch is not None:  # its /dev/shm counts with its files
            self.disk.elsewhere = lambda: shm_bytes(tree.pid)
        cgroup_oom = False
        yield_cpu_to_ranks()  # the ranks run: see there
        try:
            interval_s = self.settings.gpu_sample_interval_s
            self.gpu_watch = gpu_watch_for(self.engine, self.ref, self.plan, self.owner, interval_s)
            stop = self._watch(tree)
        finally:
            self.marker.stopped(time.time(), self.hang_since)
            if self.gpu_watch is not None:
                self.gpu_watch.stop()
            survivors = stop_job_processes(tree, self.settings.cancel_grace_s)
            if cgroup is not None:
                cgroup_oom = cgroup.oom_killed()
                if not survivors:
                    cgroup.remove()
        self.survivors = survivors
        self._note_restarts()  # one in the last moments still counts
        self._final_ingest()
        returncode = tree.returncode()
        if stop is not None:
            return self._stopped_outcome(stop, returncode), survivors
        oom_after = read_oom_kills()
        outcome = classify_exit(
            returncode if returncode is not None else -1,
            paths=self.paths,
            launcher=self.plan.launcher,
            ranks_started=self.running,
            restart=self.restarts,
            oom_killed=(None not in (oom_before, oom_after) and oom_after != oom_before)
            or cgroup_oom,
            cuda_available=self.plan.cuda_available,
        )
        return outcome, survivors

    def _watch(self, tree: ProcessTree) -> StopReason | None:
        """Poll until the launcher exits (None) or the attempt must be stopped (why)."""
        started = time.monotonic()
        next_scan = 0.0
        while True:
            # Recording the processes is the costly part of a poll without a job cgroup (a scan
            # of the process table): every poll until the ranks are up, then less often.
            if not self.running or time.monotonic() >= next_scan:
                tree.poll()
                next_scan = time.monotonic() + PROCESS_SCAN_S
            self._note_restarts()
            self.ingestor.poll()
            self._poll_declared()
            self.registrar.poll()
            self._note_progress(tree)
            if tree.returncode() is not None:
                return None
            stop = self._stop_reason(started)
            if stop is StopReason.HANG or (stop is None and self._stacks_wanted()):
                self._record_stacks(tree, "hang" if stop is StopReason.HANG else "request")
            if stop is not None:
                log.info("job %s attempt %d: stopping (%s)", self.job_id, self.attempt, stop)
                if stop in FAILING_STOPS and self.announce is not None:
                    failing = self._stopped_outcome(stop, None)
                    if failing is not None:
                        self.announce(failing)
                return stop
            tree.wait(self.settings.worker_poll_s)

    def _note_progress(self, tree: ProcessTree) -> None:
        if not self.running and (
            self.plan.launcher == "python"
            or tree.descendants >= self.plan.expected_ranks
            or self.ingestor.log_lines_seen > 0
        ):
            self.running = True
            retry_db(lambda: self._transition(JobState.RUNNING), "starting→running", tries=2)

    def _note_restarts(self) -> None:
        if self.spec.max_restarts > 0:
            count = elastic_restart_count(self.paths.torchelastic_dir)
            if self.restarts < count:
                # The new ranks take a while to write (torch's import); what the ranks before
                # the restart wrote goes in first, so the event divides the attempt's points.
                self.ingestor.flush()
            while self.restarts < count:
                self.restarts += 1
                self._record_restart(self.restarts)

    def _record_restart(self, restart: int) -> None:
        log.info("job %s attempt %d: elastic restart %d", self.job_id, self.attempt, restart)
        data: dict[str, object] = {"restart": restart, "max_restarts": self.spec.max_restarts}
        retry_db(lambda: self._event("restart", data), "recording a restart", tries=2)

    def _transition(self, target: JobState) -> bool:
        with session_scope(self.engine) as session:
            if self.node is not None and target is JobState.RUNNING:
                mark_node_running(session, self.job_id, self.attempt, self.node)
            return transition_job(session, self.job_id, target, attempt=self.attempt)

    def _event(self, kind: str, data: dict[str, object]) -> None:
        with session_scope(self.engine) as session:
            try:
                add_attempt_event(session, self.job_id, kind, self.attempt, data)
            except AttemptSuperseded:
                log.info(
                    "job %s: attempt %d superseded; %s not recorded",
                    self.job_id,
                    self.attempt,
                    kind,
                )

    def _stop_reason(self, started: float) -> StopReason | None:
        now = time.monotonic()
        if shutdown_requested():
            return StopReason.SHUTDOWN
        if self.heartbeat.lost or self.ingestor.superseded or self.registrar.superseded:
            return StopReason.LOST
        if self.spec.timeout_s is not None and now - started >= self.spec.timeout_s:
            return StopReason.TIMEOUT
        rendezvous_s = self.rendezvous_timeout_s
        if rendezvous_s is not None and not self.running and now - started >= rendezvous_s:
            return StopReason.RENDEZVOUS
        hang_s = self.spec.hang_timeout_s
        last_seen = max(started, self.ingestor.last_event_at)
        if hang_s is not None and self._runs_rank_0() and now - last_seen >= hang_s:
            self.hang_since = time.time() - (now - last_seen)
            return StopReason.HANG
        if self.heartbeat.cancelling:
            return StopReason.CANCEL
        if self.gpu_watch is not None and self.gpu_watch.stop_message is not None:
            return StopReason.IDLE_GPU
        self.over_disk = self.disk.check()
        if self.over_disk is not None:
            return StopReason.DISK
        if now < self.next_cancel_check:
            return None
        self.next_cancel_check = now + CANCEL_CHECK_S
        return StopReason.CANCEL if self._read_state() is JobState.CANCELLING else None

    def _read_state(self) -> JobState | None:
        """The job's state while at this attempt; None when unknown (the database is away: the
        heartbeat goes on reading it). Notes a request for the ranks' stacks on the way."""
        try:
            with session_scope(self.engine) as session:
                signals = read_job_signals(session, self.job_id, self.attempt)
        except SQLAlchemyError as exc:
            log.warning("%s: cannot read the job's state: %s", self.ref, exc)
            return None
        self.stacks_requested_at = signals.stacks_requested_at
        self.ingestor.live = signals.watched()
        return signals.state

    def _stacks_wanted(self) -> bool:
        """A request for the ranks' stacks made during this attempt and not served yet."""
        requested = self.stacks_requested_at
        if requested is None or requested == self.stacks_served:
            return False
        self.stacks_served = requested
        moment = requested if requested.tzinfo else requested.replace(tzinfo=UTC)
        return moment.timestamp() >= self.started_wall

    def _record_stacks(self, tree: ProcessTree, reason: str) -> None:
        """Every rank's Python stack now, stored with the job (`worker.stacks`)."""
        tree.poll()
        pids = [tree.pid, *tree.find_live()]
        retry_db(
            lambda: record_rank_stacks(
                self.engine, self.ref, self.node or 0, pids, self.paths.log_dir, reason
            ),
            "recording the ranks' stacks",
            tries=2,
        )

    def _preempted_by(self) -> str | None:
        """The dispatcher's message when the cancel was a preemption, else None."""
        try:
            with session_scope(self.engine) as session:
                return preemption_of(session, self.job_id, self.attempt)
        except SQLAlchemyError as exc:
            log.warning("%s: cannot read why it was stopped: %s", self.ref, exc)
            return None

    def _runs_rank_0(self) -> bool:
        """Whether rank 0, the one that reports progress, runs here: always on a single node;
        on the node whose ranks include global rank 0 for a multi-node job (torchrun assigns
        ranks at the rendezvous; the other nodes never see events, and must not call that a
        hang)."""
        return self.node is None or self.paths.rank_log(0).exists()

    def _final_ingest(self) -> None:
        for _ in range(5):
            if self.ingestor.poll(final=True):
                break
            time.sleep(1.0)
        self._poll_declared(final=True)
        self.registrar.poll(final=True)
        self.ingestor.store_marks(final=True)

    def _poll_declared(self, final: bool = False) -> None:
        """Declared outputs are registered by the node whose ranks include rank 0, as what
        rank 0 reports is."""
        if self.declared is not None and self._runs_rank_0():
            self.declared.poll(final=final)

    def _stopped_outcome(self, stop: StopReason, returncode: int | None) -> Outcome | None:
        idle = None if self.gpu_watch is None else self.gpu_watch.stop_message
        return self.stop_outcomes.outcome(
            stop,
            returncode,
            over_disk=self.over_disk,
            preempted_by=self._preempted_by,
            idle_gpu=idle,
        )

    def warnings(self, succeeded: bool) -> list[str]:
        """The attempt's warnings (`worker.outcome_warnings`)."""
        reported = reported_count(self.ingestor, self.registrar)
        facts = AttemptFacts.of(self.spec, self.plan, self.restarts, succeeded, reported)
        return collect_warnings(self.engine, self.job_id, self.spec.checkpoint, self.paths, facts)

    def notes(self, succeeded: bool = False) -> str | None:
        """What ingestion skipped, for the job's final message (`worker.outcome_warnings`)."""
        single, output_dir = self.node is None, self.paths.output_dir
        facts = (self.ingestor, self.registrar, self.survivors, succeeded, single, output_dir)
        return attempt_notes(*facts)
