"""Ranks run with less than the worker: a uid of their own, directories only they may write,
and nothing of the service's to read.

**Job users.** A worker running as root runs each attempt's launcher and ranks as one of the
pool users ``launchbay-job-0`` … ``launchbay-job-<N-1>`` (`LAUNCHBAY_JOB_USERS`, made with
``useradd --system`` on first use; the Docker image makes them in advance, a bare-metal install
may too, see docs/security.md). A user is leased per job and host: a lock file in
`LAUNCHBAY_JOB_USER_LEASE_DIR` (host-local) held with ``flock`` by the supervising process,
exclusive while one attempt takes it, shared by the nodes of that same job on this host; the
kernel drops the lock when its holder dies. So no other job, of any owner, runs under that uid
at the same time, and it is never the API's or the worker's uid. When the last holder gives a
lease back, every process of that uid is SIGKILLed, and the lease file says so (`CLEAN`); a
lease taken without that mark (its last holder died) SIGKILLs whatever is left first.

**Directories.** The run directory stays the worker's (0711: the job may pass, not list); in it
the job owns, mode 0700, ``logs/``, ``home/`` (its ``HOME``), ``tmp/`` (its ``TMPDIR`` and its
``/tmp``), ``var-tmp/`` (its ``/var/tmp``: see `worker.scratch`), ``work/`` (its working
directory, `worker.workdir`), the attempt's ``checkpoints/`` and the events file; it owns its
artifacts directory (mode 0750, group: the data dir's, so an API running under the service's
uid can serve the files). The checkpoints Launchbay registered (``checkpoints/<job>/``) are the
worker's copies, never the job's (`worker.checkpoints`). The data dir, ``runs/``,
``checkpoints/``, ``artifacts/`` and ``envs/`` are 0711, ``code/`` 0750 (jobs run their own
copy), the SQLite database 0600 and ``supervisors/`` 0700. The worker never follows a link the
job may have planted when it writes or reads a job file (``O_NOFOLLOW``), takes nothing the job
user does not own from the job's directories (a hard link to another user's file), and the API
serves a checkpoint only from inside its job's directory.

**What a job leaves behind** for the next job under its uid: its scratch (``tmp/``,
``var-tmp/``) is removed when the attempt ends, its ``/dev/shm`` and System V IPC die with its
namespaces (`worker.scratch`); where there are none, what the uid owns in the host's /tmp,
/var/tmp and /dev/shm goes when the lease is given back (`worker.leftovers`), as do its IPC
objects in any case.

**Without root** none of this can happen: the ranks run as the worker's user (the worker warns
at start), or the worker refuses to start with `LAUNCHBAY_REQUIRE_ISOLATION=true`.
"""

import fcntl
import logging
import os
import pwd
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from worker import scratch
from worker.cgroups import describe_support
from worker.job_dirs import give_directories, take_back_directories
from worker.launch import RunPaths
from worker.leftovers import remove_leftovers

log = logging.getLogger(__name__)

JOB_USER_PREFIX = "launchbay-job-"
# What a lease's ``<index>.job`` says once its last holder has killed everything of its uid;
# a lease that a dead worker held still names its job, and the next one looks for leftovers.
CLEAN = "-"
OWNER_WIDTH = 256  # bytes of a lease's ``<index>.job``: a job id, padded with spaces


def can_switch_users() -> bool:
    return os.geteuid() == 0


def describe_isolation() -> str | None:
    """None when jobs run under job users here; else the warning the worker logs at start."""
    if can_switch_users():
        return None
    return (
        f"the worker is not root (uid {os.geteuid()}): jobs run under the worker's own uid and "
        "can read its environment, the database and every other job's files, and share /tmp, "
        "/var/tmp, /dev/shm and System V IPC with each other; run the worker "
        "as root for job users (docs/security.md), or set LAUNCHBAY_REQUIRE_ISOLATION=true to "
        "refuse to start like this"
    )


def ensure_job_user(name: str) -> tuple[int, int]:
    """(uid, gid) of `name`, made as a system user without a home or a shell when missing."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
             "/nonexistent", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
        )  # fmt: skip
        entry = pwd.getpwnam(name)  # made by us, or by another worker at the same moment
    return entry.pw_uid, entry.pw_gid


def user_processes(uid: int, *, zombies: bool = False) -> list[int]:
    """PIDs of the live processes whose real or effective uid is `uid`, and with `zombies`
    those that ended and wait to be reaped.

    Read from each ``/proc/<pid>/status`` (not the owner of ``/proc/<pid>``, which a process
    that makes itself non-dumpable turns into root's)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as handle:
                status = handle.read()
        except OSError:
            continue  # gone meanwhile
        state = b""
        for line in status.split(b"\n"):
            if line.startswith(b"State:"):
                state = line.split()[1]
            elif line.startswith(b"Uid:"):
                real, effective = (int(field) for field in line.split()[1:3])
                if (zombies or state != b"Z") and uid in (real, effective):
                    found.append(int(name))
                break
    return found


def _sweep_user(uid: int, timeout_s: float) -> tuple[list[int], list[int]]:
    """(PIDs killed, PIDs that survived SIGKILL until `timeout_s`)."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while True:
        left = user_processes(uid)
        if not left or time.monotonic() >= deadline:
            if left:
                log.error("processes of uid %d survive SIGKILL: %s", uid, left)
            return sorted(killed), left
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def kill_user_processes(uid: int, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL every process whose real or effective uid is `uid` until none is left; returns
    the PIDs killed."""
    return _sweep_user(uid, timeout_s)[0]


@dataclass
class JobUser:
    """A leased job user; `release` gives it back."""

    name: str
    uid: int
    gid: int
    lock_fd: int
    lease_dir: Path
    paths: RunPaths | None = None
    owner_file: Path | None = None  # the lease's ``<index>.job``: its job, or `CLEAN`
    private_scratch: bool = False  # its attempts run in namespaces of their own (`worker.scratch`)

    def env(self, paths: RunPaths) -> dict[str, str]:
        """What the ranks' environment says of their user."""
        return {
            "HOME": str(paths.home_dir),
            "TMPDIR": str(paths.run_dir / "tmp"),
            "USER": self.name,
            "LOGNAME": self.name,
        }

    def scratch(self, cwd: Path, shm_size: int | None) -> scratch.PrivateScratch | None:
        """The attempt's private scratch, where this worker gives one (`worker.scratch`)."""
        if not self.private_scratch or self.paths is None:
            return None
        keep = scratch.launch_paths(self.paths.data_dir, cwd)
        return scratch.PrivateScratch(self.paths.run_dir, shm_size, keep)

    def release(self) -> list[int]:
        """Give the lease back; the last holder kills what is left under the uid. The job's
        files become the worker's again: the next job under this uid must not own them."""
        killed: list[int] = []
        with _pool_lock(self.lease_dir):
            try:
                last = True
                try:
                    fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    last = False  # another node of the job still runs under it
                if last:
                    killed, left = _sweep_user(self.uid, 5.0)
                    remove_leftovers(self.uid, files=not self.private_scratch)
                    if not left and self.owner_file is not None:
                        # Nothing runs under the uid and, the lock being ours alone, nothing
                        # can start under it until the next lease: that one need not look.
                        write_lease_owner(self.owner_file, CLEAN)
                if self.paths is not None:
                    take_back_directories(self.paths, checkpoints=last, uid=self.uid)
            finally:
                os.close(self.lock_fd)
        return killed


@contextmanager
def _pool_lock(lease_dir: Path) -> Iterator[None]:
    """Workers of one host lease and release one at a time. Otherwise two nodes of one job
    starting together could each miss the other's lease and take two users, or an attempt
    ending could take its job's checkpoints back from the next attempt's user."""
    while True:  # until the lock is the pool's (`--remove-job-users` may remove it meanwhile)
        lease_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(lease_dir / "pool.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink > 0:
            break
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)


def lease_job_user(
    lease_dir: Path,
    pool_size: int,
    job_id: str,
    prefix: str = JOB_USER_PREFIX,
    *,
    shared: bool = True,
) -> JobUser | None:
    """The job user this job's other nodes here hold, if any (with `shared`: a node of a
    multi-node job), else one no job holds; None when the pool (users `prefix`0...) is
    exhausted."""
    with _pool_lock(lease_dir):
        found = _share_lease(lease_dir, pool_size, job_id, prefix) if shared else None
        return found or _fresh_lease(lease_dir, pool_size, job_id, prefix)


def _share_lease(lease_dir: Path, pool_size: int, job_id: str, prefix: str) -> JobUser | None:
    for index in range(pool_size):
        fd = os.open(lease_dir / f"{index}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = False  # nobody holds it
        except BlockingIOError:
            held = True
        owner = lease_dir / f"{index}.job"
        try:
            if held and read_lease_owner(owner) == job_id:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                name = f"{prefix}{index}"
                return JobUser(name, *ensure_job_user(name), fd, lease_dir, owner_file=owner)
        except (OSError, BlockingIOError):
            pass
        os.close(fd)
    return None


def _fresh_lease(lease_dir: Path, pool_size: int, job_id: str, prefix: str) -> JobUser | None:
    for index in range(pool_size):
        fd = os.open(lease_dir / f"{index}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        name, owner = f"{prefix}{index}", lease_dir / f"{index}.job"
        uid, gid = ensure_job_user(name)
        if not _left_clean(owner):
            kill_user_processes(uid)  # whatever a dead worker's job left under it
            remove_leftovers(uid, files=scratch.unavailable() is not None)
        write_lease_owner(owner, job_id)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return JobUser(name, uid, gid, fd, lease_dir, owner_file=owner)
    return None


def _left_clean(owner: Path) -> bool:
    """Whether the last release of this lease found no process left under its uid (and none
    has held it since): then there is nothing to kill, and the scan of the whole process table
    (tens of milliseconds on a busy host, on every job's way to its launch) is skipped."""
    try:
        return read_lease_owner(owner) == CLEAN
    except OSError:
        return False


def read_lease_owner(owner: Path) -> str:
    return owner.read_text().rstrip(" ")


def write_lease_owner(owner: Path, text: str) -> None:
    """Overwrite in place, padded to one width: truncating or replacing a file that has data
    makes ext4 flush it (about 5 ms here, where /run is not a tmpfs)."""
    fd = os.open(owner, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.pwrite(fd, text.encode().ljust(OWNER_WIDTH), 0)
    finally:
        os.close(fd)


def check_reachable(data_dir: Path) -> str | None:
    """Why a job user cannot reach `data_dir` (a directory above it others may not search), or
    None."""
    for directory in (data_dir, *data_dir.parents):
        if not os.stat(directory).st_mode & 0o001:
            return f"{directory} is not searchable by other users (chmod o+x)"
    return None


def isolate_attempt(
    paths: RunPaths,
    job_id: str,
    *,
    pool_size: int,
    lease_dir: Path,
    prefix: str = JOB_USER_PREFIX,
    multi_node: bool = False,
) -> JobUser | None:
    """Lease a job user (the one this job's other nodes here hold, for a `multi_node` job) and
    give it the attempt's directories; None where the worker cannot switch users. Raises
    `LaunchProblem` when it should and cannot."""
    from worker.prepare import LaunchProblem

    if not can_switch_users():
        return None
    problem = check_reachable(paths.data_dir)
    if problem is not None:
        raise LaunchProblem(f"the job's user cannot reach the data dir: {problem}")
    # A single-node job has no node to share a user with: no look at every lease of the pool.
    user = lease_job_user(lease_dir, pool_size, job_id, prefix, shared=multi_node)
    if user is None:
        raise LaunchProblem(f"all {pool_size} job users of this worker's host are in use")
    user.paths = paths
    user.private_scratch = scratch.unavailable() is None
    try:
        give_directories(paths, user.uid, user.gid)
    except BaseException:
        user.release()
        raise
    return user


def check_isolation(require: bool) -> None:
    """At worker start: warn loudly what is not isolated here; exit when `require`d."""
    problems = [p for p in (describe_isolation(), describe_support()) if p]
    for problem in problems:
        log.warning("JOBS ARE NOT ISOLATED: %s", problem)
    why = scratch.unavailable()
    if can_switch_users() and why is not None:
        log.warning(
            "jobs get no private /tmp, /var/tmp and /dev/shm here (%s): they use the host's, "
            "what a job user leaves there is removed when its lease ends, and it is not counted "
            "against the owner's disk quota while the job runs",
            why,
        )
    if require and problems:
        raise SystemExit(
            "LAUNCHBAY_REQUIRE_ISOLATION is set, but jobs cannot be isolated here: "
            + "; ".join(problems)
        )
