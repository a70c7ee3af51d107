"""The job's process tree: start the launcher in its own session, record every process that
appears under it, and stop them all.

torchrun starts each rank with ``start_new_session=True``, so the ranks are in neither
torchrun's session nor its process group, and a rank's own children (DataLoader workers,
user subprocesses) may start sessions of their own. Killing one process group is therefore
not enough: while the job runs the tree is polled and every process seen is recorded (with its
start time, so a reused PID is never taken for ours); a stop then looks for what is left by
session, by process group and by recorded PID. The records also go to ``pids.json`` in the run
directory, for whoever has to clean up after a worker that died (`worker.orphans`).

Nothing of a job should outlive its supervisor either: the launcher is started through
`lifeline.py`, which has the kernel SIGTERM it when the supervising process dies (torchrun then
stops its ranks), and each rank has itself SIGKILLed when its launcher dies (`rank_main.py`).

Where the worker can make cgroups (`worker.cgroups`), the launcher starts inside the attempt's
own, and whatever is in it is the job's too, whatever it forked or `setsid`: what cannot escape.
"""

import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from jobs.contract import env as rank_env
from worker.cgroups import JobCgroup
from worker.launch import LaunchPlan
from worker.process_table import Proc, live_processes, proc_stat
from worker.scratch import PrivateScratch

log = logging.getLogger(__name__)

LIFELINE = Path(__file__).resolve().with_name("lifeline.py")
_shutdown = threading.Event()


def request_shutdown(signum: int | None = None, frame: object = None) -> None:
    """Ask the running supervisor to stop its job's processes and give up the attempt.

    Called on the worker's cold shutdown (`worker.rq_worker`) and as a node supervisor's SIGTERM
    handler (`worker.node`)."""
    _shutdown.set()


def shutdown_requested() -> bool:
    return _shutdown.is_set()


@dataclass(frozen=True)
class ProcessRecord:
    pid: int
    create_time: float
    pgid: int
    sid: int
    name: str


class Launched(Protocol):
    """A launcher as the tree sees it: torchrun's `subprocess.Popen`, or a warm launcher
    (`worker.warm_start.WarmProcess`)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...


class ProcessTree:
    """The launcher (our child, or a fork server's) and every process recorded under it."""

    def __init__(
        self,
        popen: Launched,
        pids_file: Path | None = None,
        cgroup: JobCgroup | None = None,
        server_pid: int | None = None,
    ) -> None:
        """`server_pid`: the fork server a warm launcher was forked from, which is not the
        job's, nor is its session (the launcher may be seen in it before its own `setsid`)."""
        self.popen = popen
        self.cgroup = cgroup
        self.records: dict[int, ProcessRecord] = {}
        self.descendants = 0
        self._pids_file = pids_file
        self._own = {os.getpid(), 1}
        self._own_groups = {os.getsid(0), os.getpgid(0)}
        self._announced: set[int] = set()
        if server_pid is not None:
            self._own.add(server_pid)
            with suppress(OSError):
                self._own_groups |= {os.getsid(server_pid), os.getpgid(server_pid)}
        self.poll()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def returncode(self) -> int | None:
        """The launcher's exit status, None while it runs; what a warm launcher said meanwhile
        is read with it, and the ranks it announced are recorded at once (it waits for that)."""
        code = self.popen.poll()
        self._record_announced()
        return code

    def _record_announced(self) -> None:
        """Record the ranks a warm launcher said it forked, before a scan could miss the short
        ones (only children of the launcher: the launcher runs as the job user)."""
        announced = [p for p in getattr(self.popen, "announced", ()) if p not in self._announced]
        # A rank that ended is still the launcher's child until it is told (`recorded`).
        found = [
            proc_stat(pid, zombie=True)
            for pid in announced
            if pid not in self.records and pid not in self._own
        ]
        procs = [proc for proc in found if proc is not None and proc.ppid == self.pid]
        if announced and self.pid not in self.records:  # in its own session by now
            launcher = proc_stat(self.pid)
            if launcher is not None:
                procs.append(launcher)
        self._record(procs)
        # Each once (one gone already is not looked for again), but a rank not yet in its own
        # session is looked for at the next call, and the launcher told only then.
        pending = {proc.pid for proc in procs if proc.pid not in self.records}
        self._announced.update(set(announced) - pending)
        if announced:
            self._save()
        recorded = getattr(self.popen, "recorded", None)
        if recorded is not None and not pending:
            recorded()  # the launcher may reap them now

    def _record(self, procs: list[Proc]) -> None:
        for proc in procs:
            record = self._record_of(proc)
            if record is not None:
                self.records[proc.pid] = record

    def _record_of(self, proc: Proc) -> ProcessRecord | None:
        """The record of `proc`; None while it is in a session or group of ours (a warm
        launcher before its `setsid`), or a warm rank still in its launcher's: recorded at a
        later poll, in its own."""
        try:
            pgid, sid = os.getpgid(proc.pid), os.getsid(proc.pid)
        except (ProcessLookupError, PermissionError):
            return None
        becoming_rank = proc.ppid == sid == self.pid and hasattr(self.popen, "announced")
        if {pgid, sid} & self._own_groups or becoming_rank:
            return None
        return ProcessRecord(proc.pid, proc.create_time, pgid, sid, proc.name)

    def wait(self, timeout_s: float) -> None:
        """Sleep `timeout_s`, or less: until the launcher has ended (the fork server's word
        of a warm one, the pidfd of a child), so that its end is seen at once."""
        fd, opened = getattr(self.popen, "exit_fd", None), False
        known = len(self._announced)
        if fd is None:
            try:
                fd, opened = os.pidfd_open(self.pid), True
            except (OSError, AttributeError):  # gone already, or no pidfds here
                time.sleep(timeout_s)
                return
        try:
            ready, _, _ = select.select([fd], [], [], timeout_s)
        finally:
            if opened:
                os.close(fd)
        if ready and self.returncode() is None and len(self._announced) == known:
            time.sleep(timeout_s)  # ready without news: never spin on it

    def _is_ours(self, proc: Proc) -> bool:
        record = self.records.get(proc.pid)
        return record is not None and abs(record.create_time - proc.create_time) < 0.01

    def poll(self) -> None:
        """Record the processes now under the launcher and under any process already recorded
        (an orphaned rank still counts), and how many descendants the launcher has."""
        self._record_announced()
        if self.cgroup is not None and self._poll_cgroup(self.cgroup):
            return
        procs = live_processes()
        children: dict[int, list[int]] = {}
        for proc in procs.values():
            children.setdefault(proc.ppid, []).append(proc.pid)
        recorded = [p.pid for p in procs.values() if self._is_ours(p) and p.pid != self.pid]
        # The launcher last, so it is walked first and its whole subtree counts as under it.
        stack = [(pid, False) for pid in recorded]
        if self.pid in procs:
            stack.append((self.pid, True))
        seen: set[int] = set()
        under_launcher = 0
        while stack:
            pid, from_launcher = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            for child in children.get(pid, []):
                under_launcher += from_launcher
                stack.append((child, from_launcher))
        self.descendants = under_launcher
        new = [procs[pid] for pid in seen if pid not in self.records and pid not in self._own]
        self._record(new)
        if new:
            self._save()

    def _poll_cgroup(self, cgroup: JobCgroup) -> bool:
        """`poll` from the job's cgroup, which holds every process of the job whatever it
        forked or `setsid`: the job's few processes read instead of the whole process table
        (tens of milliseconds on a busy host, taken from the ranks' CPU). False, having done
        nothing, when the launcher is not in it (gone, or the cgroup unreadable): the table
        is scanned then."""
        pids = cgroup.pids() - self._own
        if self.pid not in pids:
            return False
        self.descendants = len(pids) - 1
        new = False
        for pid in pids - self.records.keys():
            proc = proc_stat(pid)
            # None: gone meanwhile, or still in a session of ours (recorded at a later poll).
            record = None if proc is None else self._record_of(proc)
            if record is not None:
                self.records[pid] = record
                new = True
        if new:
            self._save()
        return True

    def _save(self) -> None:
        if self._pids_file is None:
            return
        temp = self._pids_file.with_name(f".{self._pids_file.name}.tmp")
        try:
            temp.write_text(json.dumps([asdict(r) for r in self.records.values()]))
            os.replace(temp, self._pids_file)
        except OSError:
            log.warning("could not write %s", self._pids_file, exc_info=True)

    def find_live(self) -> list[int]:
        """PIDs alive now that belong to the job: in its cgroup, recorded ones, or in a recorded
        session/group."""
        in_cgroup = self.cgroup.pids() - self._own if self.cgroup is not None else set()
        groups = {r.sid for r in self.records.values()} | {r.pgid for r in self.records.values()}
        groups -= self._own_groups
        found = []
        for proc in live_processes().values():
            if proc.pid in self._own:
                continue
            if self._is_ours(proc) or proc.pid in in_cgroup:
                found.append(proc.pid)
                continue
            try:
                if os.getsid(proc.pid) in groups or os.getpgid(proc.pid) in groups:
                    found.append(proc.pid)
            except (ProcessLookupError, PermissionError):
                continue
        return found


def with_lifeline(argv: list[str], signal_number: int = signal.SIGTERM) -> list[str]:
    """`argv` started through `lifeline.py`: it gets `signal_number` when this process dies."""
    lifeline = [sys.executable, "-I", "-S", str(LIFELINE), str(os.getpid()), str(signal_number)]
    return [*lifeline, "--", *argv]


def start_launcher(
    plan: LaunchPlan,
    output: Path,
    pids_file: Path | None = None,
    cgroup: JobCgroup | None = None,
    user: tuple[int, int] | None = None,
    scratch: PrivateScratch | None = None,
) -> ProcessTree:
    """Start the plan's command in a session of its own (and in `cgroup`, before it runs
    anything), its output appended to `output`; it is SIGTERMed by the kernel if this process
    dies first. With `user` (uid, gid), the command runs as that user (`worker.isolation`), in
    its private `scratch` when given (`worker.scratch`, which gets the environment through a
    pipe and becomes the user itself)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    env = plan.env if cgroup is None else {**plan.env, rank_env.CGROUP: cgroup.launcher_env}
    argv, env_pipe = with_lifeline(plan.argv), None
    if scratch is not None and user is not None:
        env_pipe = os.pipe()
        argv = scratch.command(argv, uid=user[0], gid=user[1], env_fd=env_pipe[0])
        user = None
    # Never through a link: the job user may own the directory.
    out_fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    try:
        with open(out_fd, "ab") as out:
            popen = subprocess.Popen(
                argv,
                env={} if env_pipe is not None else env,
                pass_fds=() if env_pipe is None else (env_pipe[0],),
                cwd=plan.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                user=None if user is None else user[0],
                group=None if user is None else user[1],
                extra_groups=None if user is None else [],
            )
    except BaseException:
        if env_pipe is not None:
            os.close(env_pipe[1])
        raise
    finally:
        if env_pipe is not None:
            os.close(env_pipe[0])
    if env_pipe is not None:
        _send_env(env_pipe[1], env)
    if cgroup is not None:
        cgroup.add(popen.pid)
    return ProcessTree(popen, pids_file, cgroup)


def _send_env(fd: int, env: dict[str, str]) -> None:
    """`env` as JSON down the pipe `fd`, then closed; a helper that died first is the launcher's
    exit to report."""
    data = memoryview(json.dumps(env).encode())
    try:
        while data:
            data = data[os.write(fd, data) :]
    except BrokenPipeError:
        pass
    finally:
        os.close(fd)


def _kill(pid: int, sig: signal.Signals, group: bool = False) -> None:
    with suppress(ProcessLookupError, PermissionError):
        (os.killpg if group else os.kill)(pid, sig)


def stop_job_processes(
    tree: ProcessTree, grace_s: float, *, kill_timeout_s: float = 5.0
) -> list[int]:
    """SIGTERM the launcher's process group (torchrun passes it on to the ranks), give the job
    `grace_s` to exit, then SIGKILL every process of it that is left.

    Returns the PIDs still alive after `kill_timeout_s` of SIGKILLs (normally none). Also the
    sweep after a launcher that exited on its own: whatever it left behind is stopped.
    """
    tree.poll()
    if tree.returncode() is None:
        _kill(tree.pid, signal.SIGTERM, group=True)
    elif not (live := tree.find_live()):  # it left nothing: no grace (a look reads all of /proc)
        return tree.cgroup.kill_all() if tree.cgroup is not None else []
    else:
        for pid in live:
            _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while True:
        tree.poll()
        if tree.returncode() is not None and not tree.find_live():
            return tree.cgroup.kill_all() if tree.cgroup is not None else []
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    deadline = time.monotonic() + kill_timeout_s
    while True:
        tree.poll()
        if tree.returncode() is None:
            _kill(tree.pid, signal.SIGKILL, group=True)
        live = tree.find_live()
        for pid in live:
            _kill(pid, signal.SIGKILL)
        if tree.returncode() is not None and not live:
            return tree.cgroup.kill_all() if tree.cgroup is not None else []
        if time.monotonic() >= deadline:
            log.error("processes of the job survived SIGKILL: %s", live)
            return live
        time.sleep(0.05)


_ATTEMPT_DIR = re.compile(r"^attempt_(\d+)$")


def elastic_restart_count(torchelastic_dir: Path) -> int:
    """How many times torchrun has restarted the worker group so far.

    torchrun makes ``<log dir>/<run id>/attempt_<k>/`` when it starts the ranks for the k-th time.
    """
    count = 0
    try:
        for run in torchelastic_dir.iterdir():
            for entry in run.iterdir():
                match = _ATTEMPT_DIR.match(entry.name)
                if match:
                    count = max(count, int(match.group(1)))
    except (FileNotFoundError, NotADirectoryError):
        pass
    return count
