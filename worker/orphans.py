"""Find and stop what is left of attempts whose supervisor died (a worker SIGKILLed, a machine
that lost its worker process).

The kernel already takes most of it (`lifeline.py`, `rank_main.py`): the launcher is SIGTERMed
when its supervisor dies, and each rank SIGKILLed when its launcher does. What can remain are
processes a rank started in sessions of their own. So each supervisor leaves a note,

    <data dir>/supervisors/<host>/<job>-<attempt>[-node<k>].json   {job_id, attempt, node,
                                              pid, create_time, boot_time, pids_file}

while its attempt runs, and removes it when nothing of the attempt is left. A worker starting,
between its attempts, and the watchdog of one that died (`worker.watchdog`) read the notes of
their own host: where the supervisor is gone (no process with that PID and start time since the
same boot, or only its zombie), every process still recorded in the attempt's `pids.json`, or
whose environment names the attempt (and node), is SIGKILLed, and so is everything in the
attempt's cgroup (`worker.cgroups`), which is removed. Notes of other hosts are never read (the
data dir may be shared): PIDs mean nothing there.
"""

import json
import logging
import os
import shutil
import signal
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from jobs.contract import env as rank_env
from jobs.contract.data_dir import DataLayout
from worker.cgroups import JobCgroup, cgroup_name
from worker.isolation import can_switch_users
from worker.job_dirs import take_back_directories
from worker.launch import NODE_ENV, RunPaths
from worker.process_table import proc_stat

log = logging.getLogger(__name__)

# psutil's start times are rounded; a reused PID starts at another time.
SAME_START_S = 0.01


@dataclass(frozen=True)
class SupervisorNote:
    job_id: str
    attempt: int
    pid: int
    create_time: float
    boot_time: float
    pids_file: str
    node: int | None = None  # for a node of a multi-node job (several may run on one host)


def notes_dir(data_dir: Path) -> Path:
    return DataLayout(data_dir).supervisor_notes(socket.gethostname())


def note_path(data_dir: Path, job_id: str, attempt: int, node: int | None = None) -> Path:
    suffix = "" if node is None else f"-node{node}"
    return notes_dir(data_dir) / f"{job_id}-{attempt}{suffix}.json"


def leave_note(
    data_dir: Path, job_id: str, attempt: int, pids_file: Path, node: int | None = None
) -> Path:
    """Record that this process supervises the attempt (see the module docstring)."""
    me = psutil.Process()
    note = SupervisorNote(
        job_id, attempt, me.pid, me.create_time(), psutil.boot_time(), str(pids_file), node
    )
    path = note_path(data_dir, job_id, attempt, node)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(asdict(note)))
    os.replace(temp, path)
    return path


def remove_note(data_dir: Path, job_id: str, attempt: int, node: int | None = None) -> None:
    try:
        note_path(data_dir, job_id, attempt, node).unlink()
    except FileNotFoundError:
        pass


def _alive(pid: int, create_time: float) -> bool:
    """Whether the supervisor that wrote a note still runs (a zombie does not)."""
    try:
        process = psutil.Process(pid)
        same = abs(process.create_time() - create_time) < SAME_START_S
        return same and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True


def wait_until_dead(pid: int, timeout_s: float = 5.0) -> bool:
    """Wait for process `pid` to be gone or a zombie; whether it is."""
    deadline = time.monotonic() + timeout_s
    while proc_stat(pid) is not None:  # None: gone, or a zombie
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _recorded(pids_file: Path) -> dict[int, float]:
    try:
        records = json.loads(pids_file.read_text())
        return {int(r["pid"]): float(r["create_time"]) for r in records}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def attempt_processes(note: SupervisorNote) -> list[psutil.Process]:
    """Live processes of the attempt: recorded in its pids.json (same PID and start time), or
    with the attempt in their environment (every process the ranks start inherits it)."""
    recorded = _recorded(Path(note.pids_file))
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["pid", "create_time", "status"]):
        info = proc.info
        if info["pid"] == me or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        started = recorded.get(info["pid"])
        if started is not None and abs(started - (info["create_time"] or 0)) < SAME_START_S:
            found.append(proc)
            continue
        try:
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if (
            env.get(rank_env.JOB_ID) == note.job_id
            and env.get(rank_env.ATTEMPT) == str(note.attempt)
            and env.get(NODE_ENV) == (None if note.node is None else str(note.node))
        ):
            found.append(proc)
    return found


def _read_note(path: Path) -> SupervisorNote | None:
    try:
        return SupervisorNote(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def stop_orphans(data_dir: Path, *, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL what is left of this host's attempts whose supervisor is gone; returns the PIDs
    killed. A note is removed once nothing of its attempt is left."""
    try:
        paths = sorted(notes_dir(data_dir).glob("*.json"))
    except OSError:
        return []
    boot_time = psutil.boot_time()
    killed: list[int] = []
    for path in paths:
        note = _read_note(path)
        if note is None:
            continue
        if abs(note.boot_time - boot_time) < 1 and _alive(note.pid, note.create_time):
            continue
        group = JobCgroup.existing(cgroup_name(note.job_id, note.attempt, note.node))
        if group is not None:
            killed += group.pids()
            group.kill_all(timeout_s)
            group.remove()
        left = attempt_processes(note) if abs(note.boot_time - boot_time) < 1 else []
        stopped: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while left:
            for proc in left:
                try:
                    proc.send_signal(signal.SIGKILL)
                    stopped.add(proc.pid)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
            left = attempt_processes(note)
        killed += stopped
        if left:
            log.error(
                "job %s attempt %d: processes %s survive SIGKILL",
                note.job_id,
                note.attempt,
                [p.pid for p in left],
            )
            continue
        if stopped:
            log.warning(
                "job %s attempt %d: its supervisor died; killed %s",
                note.job_id,
                note.attempt,
                sorted(stopped),
            )
        _take_back(data_dir, note)
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    return sorted(set(killed))


def _take_back(data_dir: Path, note: SupervisorNote) -> None:
    """The dead attempt's directories the worker's again and its scratch removed, as its
    supervisor would have done on giving its job user back: the next job under that uid must
    find nothing of it (`worker.isolation`)."""
    if can_switch_users():
        paths = RunPaths.for_attempt(data_dir, note.job_id, note.attempt, note.node)
        take_back_directories(paths, checkpoints=False)
        # What the dead attempt wrote is lost with it (what it registered is kept): its working
        # and checkpoint directories, its user's files, go.
        for owned in (paths.work_dir, paths.checkpoint_dir):
            shutil.rmtree(owned, ignore_errors=True)
