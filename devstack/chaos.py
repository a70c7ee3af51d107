"""A chaos soak (R12): jobs submitted steadily to a stack with the dispatcher and several
workers while a loop SIGKILLs a worker, the API, Redis or a rank every so often (restarting
each), then an account of what came of every job.

`run_soak` drives it; `SoakReport` says, after the faults stop and every job had its time to
end: the jobs stuck (not terminal), failed other than by their own `max_retries`, the metric
gaps and duplicates within an attempt, the checkpoints whose download does not match their
sha256, the processes of the jobs still alive, and the database's integrity check. The bench
(`python -m bench chaos`) runs it for 20 minutes; a short form runs in the tests.
"""

import hashlib
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from devstack.procs import SESSION_MARKER, job_processes, wait_until
from devstack.services import RedisServer, private_redis
from devstack.stack import Stack
from jobs.contract import env as rank_env
from jobs.states import JobState

# A rank first: warm-started jobs are short, and the first fault comes while the first runs.
FAULTS = ("rank", "worker", "api", "redis")
# The soak's processes carry this (or the test session's marker), so leftovers can be found.
MARKER = os.environ.get(SESSION_MARKER) or f"chaos-{uuid.uuid4().hex}"
# Heartbeats and the reaper fast enough that a killed worker's job is retried within seconds.
FAST_FAULTS = {
    "LAUNCHBAY_HEARTBEAT_INTERVAL_S": "1",
    "LAUNCHBAY_REAPER_INTERVAL_S": "1",
    "LAUNCHBAY_REAPER_LOST_AFTER_S": "6",
    "LAUNCHBAY_SUBMISSIONS_PER_MINUTE": "0",
}
WORKER_ARGS = ("--slots", "2")
# Retries for worker losses and elastic restarts for killed ranks: each job should survive
# what the soak does to it.
MAX_RETRIES = 3
MAX_RESTARTS = 2


@dataclass(frozen=True)
class SoakPlan:
    duration_s: float  # faults are injected and jobs submitted for this long
    jobs: int  # submitted evenly over the duration
    fault_every_s: tuple[float, float] = (20.0, 60.0)
    faults: tuple[str, ...] = FAULTS
    seed: int = 0
    settle_s: float = 300.0  # after the faults, how long every job has to end
    cycle: bool = False  # the faults in `faults`' order (each kind in turn), else at random


@dataclass
class SoakReport:
    jobs: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    states: Counter[str] = field(default_factory=Counter)
    stuck: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # not by exhausting their max_retries
    gaps: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    checkpoints: int = 0
    bad_checkpoints: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    integrity: str = ""
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        problems = [self.stuck, self.failed, self.gaps, self.duplicates, self.bad_checkpoints]
        return not any(problems) and not self.orphans and self.integrity == "ok"

    def summary(self) -> str:
        return (
            f"{self.jobs} jobs ({dict(self.states)}), faults {dict(self.faults)} in "
            f"{self.seconds:.0f} s: {len(self.stuck)} stuck, {len(self.failed)} failed other than "
            f"by their max_retries, {len(self.gaps)} metric gaps, {len(self.duplicates)} "
            f"duplicate points, {len(self.bad_checkpoints)} of {self.checkpoints} checkpoints "
            f"not matching their sha256, {len(self.orphans)} orphan processes, database "
            f"integrity: {self.integrity}"
        )


def soak_spec(index: int) -> dict[str, Any]:
    """A two-rank job of ~10 s that checkpoints every epoch and reports every step."""
    return {
        "name": f"chaos-{index}",
        "recipe": "synthetic",
        "nproc_per_node": 2,
        "config": {"epochs": 3, "sleep_per_step_s": 0.2, "log_every_steps": 1},
        "checkpoint": {"every_epochs": 1, "keep_last": 5},
        "max_retries": MAX_RETRIES,
        "max_restarts": MAX_RESTARTS,
        "timeout_s": 240,
        "tags": {"soak": "r12"},
    }


class Chaos:
    """The fault loop, in a thread: one fault every `plan.fault_every_s`, each part restarted."""

    def __init__(
        self, stack: Stack, redis: RedisServer, plan: SoakPlan, job_ids: list[str]
    ) -> None:
        """`job_ids`: the soak's jobs (filled as they are submitted), whose ranks alone are
        killed: another stack on the same host (a test beside this one) is left alone."""
        self.stack, self.redis, self.plan, self.job_ids = stack, redis, plan, job_ids
        self.random = random.Random(plan.seed)
        self.done = Counter[str]()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "Chaos":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def wait_for_every_kind(self, timeout_s: float) -> bool:
        """Wait until each kind of fault was injected once; whether it was."""
        deadline = time.monotonic() + timeout_s
        while set(self.done) < set(self.plan.faults) and time.monotonic() < deadline:
            time.sleep(0.5)
        return set(self.done) >= set(self.plan.faults)

    def _loop(self) -> None:
        while not self._stop.wait(self.random.uniform(*self.plan.fault_every_s)):
            self._inject()

    def _inject(self) -> None:
        """One fault; in `cycle` order, the next kind, tried again each second until there is
        something of that kind to kill (a rank while no job runs)."""
        faults = self.plan.faults
        if self.plan.cycle:
            kind = faults[sum(self.done.values()) % len(faults)]
        else:
            kind = self.random.choice(faults)
        while not self._stop.is_set():
            try:
                if getattr(self, f"kill_{kind}")():
                    self.done[kind] += 1
                    return
            except Exception as exc:  # noqa: BLE001 - reported, the soak goes on
                self.errors.append(f"{kind}: {exc!r}")
                return
            if not self.plan.cycle:
                return
            self._stop.wait(1)

    def kill_worker(self) -> bool:
        """SIGKILL a worker (its session), then start another."""
        live = [w for w in self.stack.workers if w.poll() is None]
        if not live:
            return False
        worker = self.random.choice(live)
        for proc in psutil.process_iter():
            if _session(proc.pid) == worker.pid:
                proc.send_signal(signal.SIGKILL)
        worker.wait(10)
        self.stack.workers.remove(worker)
        self.stack.start_worker(args=WORKER_ARGS)
        return True

    def kill_api(self) -> bool:
        assert self.stack.api is not None
        os.killpg(self.stack.api.pid, signal.SIGKILL)
        self.stack.api.wait(10)
        self.stack.api = None
        self.stack.start_api()
        return True

    def kill_redis(self) -> bool:
        """SIGKILL redis-server (it keeps nothing on disk: it comes back empty)."""
        pid = int((self.redis.dir / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not psutil.pid_exists(pid), timeout=10)
        (self.redis.dir / "redis.pid").unlink(missing_ok=True)
        time.sleep(1)
        self.redis.start()
        return True

    def kill_rank(self) -> bool:
        ids = set(self.job_ids)
        ranks = [p for p in psutil.process_iter(["cmdline"]) if _is_rank(p, ids)]
        if not ranks:
            return False
        self.random.choice(ranks).send_signal(signal.SIGKILL)
        return True


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _is_rank(proc: psutil.Process, job_ids: set[str]) -> bool:
    try:
        argv = proc.info["cmdline"] or []
        if not any(a.endswith("rank_main.py") for a in argv):
            return False
        env = proc.environ()
        return "RANK" in env and env.get(rank_env.JOB_ID) in job_ids
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def submit_steadily(stack: Stack, plan: SoakPlan, ids: list[str], stop: threading.Event) -> None:
    """`plan.jobs` jobs evenly over `plan.duration_s`; a submission that finds the API down is
    tried again (with the same Idempotency-Key) until it is answered."""
    interval = plan.duration_s / max(1, plan.jobs)
    for index in range(plan.jobs):
        key = f"r12-{plan.seed}-{index}"
        while not stop.is_set():
            try:
                with stack.client(**{"Idempotency-Key": key}) as http:
                    response = http.post("/v1/jobs", json=soak_spec(index))
                if response.status_code in (200, 201):
                    ids.append(response.json()["id"])
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        if stop.wait(interval):
            return


def run_soak(
    stack: Stack, redis: RedisServer, plan: SoakPlan, integrity: Callable[[], str]
) -> SoakReport:
    """Submit and inject faults for `plan.duration_s`, let every job end, and account for each.
    `integrity` answers "ok" when the database's own check finds nothing wrong."""
    started = time.monotonic()
    ids: list[str] = []
    stop = threading.Event()
    submitter = threading.Thread(target=submit_steadily, args=(stack, plan, ids, stop))
    with Chaos(stack, redis, plan, ids) as chaos:
        submitter.start()
        time.sleep(plan.duration_s)
        stop.set()
        if plan.cycle:  # every kind once at least, however long the restarts took meanwhile
            chaos.wait_for_every_kind(timeout_s=plan.duration_s)
    submitter.join(120)
    report = SoakReport(jobs=len(ids), faults=chaos.done)
    with stack.client() as http:
        jobs = wait_for_the_end(http, ids, plan.settle_s)
        account(http, stack, jobs, report)
    report.orphans = [f"{p.pid} {p.name()}" for p in job_processes(*ids)]
    report.integrity = integrity()
    report.failed += [f"the fault loop: {e}" for e in chaos.errors]
    report.seconds = time.monotonic() - started
    return report


def wait_for_the_end(http: httpx.Client, ids: list[str], timeout_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        jobs = [http.get(f"/v1/jobs/{job_id}").json() for job_id in ids]
        waiting = [j for j in jobs if not JobState(j["state"]).is_terminal()]
        if not waiting or time.monotonic() > deadline:
            return jobs
        time.sleep(2)


def account(
    http: httpx.Client, stack: Stack, jobs: list[dict[str, Any]], report: SoakReport
) -> None:
    for job in jobs:
        report.states[job["state"]] += 1
        name = f"{job['id']} ({job['name']})"
        if not JobState(job["state"]).is_terminal():
            report.stuck.append(f"{name}: {job['state']}, {job.get('pending_reason')}")
            continue
        if job["state"] == "failed" and job["attempt"] <= MAX_RETRIES:
            report.failed.append(f"{name}: {job['exit_reason']}: {job['message']}")
        check_points(http, job, name, report)
        check_checkpoints(http, job, name, report)


def check_points(http: httpx.Client, job: dict[str, Any], name: str, report: SoakReport) -> None:
    """Within a run of the ranks (an attempt, or the part of it after an elastic restart,
    which starts the ranks again), the `loss` points' steps go up by one, none twice."""
    items = http.get(f"/v1/jobs/{job['id']}/metrics", params={"name": "loss", "limit": 10_000})
    timeline = http.get(f"/v1/jobs/{job['id']}/timeline").json()["items"]
    restarts = sorted(int(e["id"]) for e in timeline if e["event"] == "restart")
    runs: dict[tuple[int, int], list[int]] = {}
    for point in items.json()["items"]:
        run = (point["attempt"], sum(seq < point["seq"] for seq in restarts))
        runs.setdefault(run, []).append(point["step"])
    for (attempt, restart), steps in runs.items():
        where = f"{name} attempt {attempt} (after {restart} restart(s) in all)"
        repeated = sorted(s for s, n in Counter(steps).items() if n > 1)
        if repeated:
            report.duplicates.append(f"{where}: steps {repeated[:10]} twice")
        ordered = sorted(set(steps))
        missing = [b for a, b in zip(ordered, ordered[1:], strict=False) if b != a + 1]
        if missing:
            report.gaps.append(f"{where}: a gap before steps {missing[:10]}")


def check_checkpoints(
    http: httpx.Client, job: dict[str, Any], name: str, report: SoakReport
) -> None:
    for checkpoint in http.get(f"/v1/jobs/{job['id']}/checkpoints").json()["items"]:
        report.checkpoints += 1
        response = http.get(f"/v1/jobs/{job['id']}/checkpoints/{checkpoint['id']}/download")
        digest = hashlib.sha256(response.content).hexdigest()
        if response.status_code != 200 or digest != checkpoint["sha256"]:
            report.bad_checkpoints.append(
                f"{name} checkpoint {checkpoint['id']}: {response.status_code}, sha256 {digest}"
            )


@dataclass
class SoakStack:
    stack: Stack
    redis: RedisServer
    database_url: str

    def integrity(self) -> str:
        return database_integrity(self.database_url)


@contextmanager
def soak_stack(root: Path, database_url: str | None, workers: int = 2) -> Iterator[SoakStack]:
    """A stack for the soak: the dispatcher, fast fault settings, `workers` workers of 2 slots,
    a Redis of its own the soak may kill, and SQLite under `root` unless `database_url`."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o711)  # a root worker's job users pass through it to the data dir
    url = database_url or f"sqlite:///{root / 'data' / 'launchbay.db'}"
    with private_redis() as redis:
        stack = Stack(
            root=root, database_url=url, redis_url=redis.url(), marker=MARKER,
            extra_env=FAST_FAULTS,
        )  # fmt: skip
        try:
            stack.start_api()
            for _ in range(workers):
                stack.start_worker(args=WORKER_ARGS)
            yield SoakStack(stack, redis, url)
        finally:
            stack.stop()


def database_integrity(url: str) -> str:
    """ "ok", or what is wrong: SQLite's own integrity check of its file, and on both databases
    the rows' agreement (every checkpoint, metric point, log line and event belongs to a job)."""
    from sqlalchemy import create_engine, text

    checks = {
        table: f"SELECT count(*) FROM {table} t WHERE NOT EXISTS "
        f"(SELECT 1 FROM job WHERE job.id = t.job_id)"
        for table in ("checkpoint", "metric_point", "log_line", "job_event")
    }
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            if url.startswith("sqlite"):
                verdict = connection.execute(text("PRAGMA integrity_check")).scalar()
                if verdict != "ok":
                    return f"PRAGMA integrity_check: {verdict}"
            broken = {t: connection.execute(text(q)).scalar() for t, q in checks.items()}
    finally:
        engine.dispose()
    bad = {t: n for t, n in broken.items() if n}
    return "ok" if not bad else f"rows without their job: {bad}"
