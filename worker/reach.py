"""What the job users of a root worker must reach, checked when the worker starts: a path they
cannot reach is the worker's refusal to start, naming it, never a job's `launch_error`.

A job user runs the worker's interpreter with its standard library and site-packages (torch,
numpy...), Launchbay's rank entry, lifeline and ``jobs`` package, and works in the data dir,
whose ``envs/`` holds the jobs' environments (built with uv). `check_job_reach` does, at start:

1. the data dir (`data_dir_problem`): every directory above it searchable by other users, its
   filesystem neither read-only nor ``noexec`` (jobs' environments and programs run from it);
2. the rest (`needed`, `why_unreachable`): a path under a directory that other users may not
   search (a ``0700`` home holding pyenv's, conda's or uv's Python, or the clone itself) is
   reached through the job's own mount namespace, where that directory is an empty tmpfs with
   only Launchbay's paths mounted back (`worker.scratch.masks`): the host's modes never change.
   Where the worker cannot give jobs namespaces (a container without ``CAP_SYS_ADMIN``), that
   directory is the refusal, as is a file other users may not read or run;
3. a probe (`probe_as_job_user`): a leased job user runs the interpreter, started as a job's
   launcher is, and reads what the ranks read; what it cannot is explained as in (2).

A refusal (`JobsCannotRun`) names the path and the two ways out: make it reachable, or run the
worker from an interpreter and virtual environment that other users can reach.
"""

import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from service.settings import Settings
from worker import scratch
from worker.isolation import check_isolation, lease_job_user
from worker.launch import RANK_ENTRY

log = logging.getLogger(__name__)
LIFELINE = Path(__file__).resolve().with_name("lifeline.py")
PROBE_TIMEOUT_S = 60.0
OTHER_X, OTHER_R = 0o001, 0o004
WAYS_OUT = (
    "Either make it reachable ({fix}), or run the worker from an interpreter and a virtual "
    "environment that other users can reach (e.g. Debian's: rm -rf .venv && "
    "PYTHON=/usr/bin/python3.11 scripts/setup.sh); docs/security.md, 'Job users'"
)

# Run by the job's interpreter, as a job user: what it cannot read, search, run or import.
PROBE = """
import importlib.util, json, os, sys
need, bad = json.loads(sys.argv[1]), []
for path in need["read"]:
    try:
        open(path, "rb").close()
    except OSError as exc:
        bad.append([path, exc.strerror])
for path in need["search"] + need["run"]:
    if not os.access(path, os.X_OK):
        bad.append([path, "not searchable" if path in need["search"] else "not executable"])
for name in need["modules"]:
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    if spec is None:
        bad.append([name, "cannot be imported (sys.path: " + ", ".join(sys.path) + ")"])
print(json.dumps(bad))
"""


class JobsCannotRun(Exception):
    """A root worker's job users could not run a job here; the message says which path, why
    and the ways out."""


@dataclass(frozen=True)
class Needed:
    """A path a job user needs: `what` it is, and whether it reads or runs it."""

    what: str
    path: Path
    run: bool = False


def needed() -> list[Needed]:
    """What a job user reads or runs of the worker's installation (not the data dir)."""
    found = [
        Needed("the interpreter", Path(os.path.realpath(sys.executable)), run=True),
        *(Needed("the interpreter's library", lib) for lib in scratch.interpreter_libraries()),
        Needed("the standard library", Path(sysconfig.get_paths()["stdlib"]) / "os.py"),
        Needed("the rank entry", RANK_ENTRY),
        Needed("the lifeline", LIFELINE),
        Needed("Launchbay's job SDK", Path(__file__).resolve().parents[1] / "jobs/__init__.py"),
    ]
    torch = importlib.util.find_spec("torch")
    if torch is not None and torch.origin:
        found.append(Needed("the base packages (torch)", Path(torch.origin)))
        run = Path(torch.origin).with_name("distributed") / "run.py"
        found += [Needed("torchrun", run)] if run.is_file() else []
    uv = shutil.which("uv", path=sysconfig.get_paths()["scripts"])
    if uv is not None:
        found.append(Needed("uv, which builds jobs' environments", Path(uv), run=True))
    return found


def _mode(path: Path) -> str:
    return f"mode {os.stat(path).st_mode & 0o7777:04o}"


def unsearchable(path: Path) -> Path | None:
    """The topmost directory above `path` that other users may not search, or None."""
    for directory in reversed(path.parents):
        if not os.stat(directory).st_mode & OTHER_X:
            return directory
    return None


def why_unreachable(item: Needed, namespaces_missing: str | None) -> str | None:
    """Why a job user cannot reach `item` (None: it can, directly or through its namespace,
    unless `namespaces_missing` says why this worker gives jobs none)."""
    blocked = unsearchable(item.path)
    if blocked is not None and namespaces_missing is not None:
        fix = f"chmod o+x {blocked}"
        return (
            f"job users cannot reach {item.what}, {item.path}: {blocked} is not searchable by "
            f"other users ({_mode(blocked)}), and this worker cannot give jobs a mount namespace "
            f"to reach it through ({namespaces_missing}). " + WAYS_OUT.format(fix=fix)
        )
    bit, verb = (OTHER_X, "run") if item.run else (OTHER_R, "read")
    if not os.stat(item.path).st_mode & bit:
        fix = f"chmod o+{'rx' if item.run else 'r'} {item.path}"
        return (
            f"job users cannot {verb} {item.what}, {item.path}: other users may not "
            f"({_mode(item.path)}). " + WAYS_OUT.format(fix=fix)
        )
    return None


def installation_problem() -> str | None:
    """Why a root worker's job users could not run this interpreter, its packages or
    Launchbay's code (`why_unreachable`), or None."""
    missing = scratch.unavailable() if os.geteuid() == 0 else None
    for item in needed() if os.geteuid() == 0 else []:
        problem = why_unreachable(item, missing)
        if problem is not None:
            return problem
    return None


def data_dir_problem(data_dir: Path, *, job_users: bool) -> str | None:
    """Why jobs cannot work in `data_dir` (None: they can): a directory above it that other
    users may not search (when jobs run as job users), or its filesystem read-only or noexec."""
    existing = data_dir
    while not existing.exists():
        existing = existing.parent
    for directory in [*reversed(existing.parents), existing] if job_users else []:
        if directory != data_dir and not os.stat(directory).st_mode & OTHER_X:
            return (
                f"job users cannot reach the data dir {data_dir}: {directory} is not searchable "
                f"by other users ({_mode(directory)}). Either chmod o+x {directory}, or set "
                "LAUNCHBAY_DATA_DIR to a directory whose parents other users may search (e.g. "
                "under /var/lib/launchbay)"
            )
    flags = os.statvfs(existing).f_flag
    if flags & os.ST_RDONLY:
        why, remount = "a read-only filesystem: the worker could not write jobs' files", "rw"
    elif flags & os.ST_NOEXEC:
        why, remount = "a filesystem mounted noexec: jobs' environments would not run", "exec"
    else:
        return None
    return (
        f"the data dir {data_dir} is on {why} there. Remount it {remount} (mount -o remount,"
        f"{remount} ...), or set LAUNCHBAY_DATA_DIR to a directory on another filesystem"
    )


def check_host(settings: Settings) -> None:
    """At a worker's start: say what is not isolated here (`check_isolation`), then refuse to
    start where jobs could not run (`check_job_reach`)."""
    check_isolation(settings.require_isolation)
    for note in check_job_reach(settings):
        log.info(note)


def check_job_reach(settings: Settings) -> list[str]:
    """At the start of a worker: the data dir, and, for a root worker's job users, everything
    else they need (module docstring). Returns notes for the log (directories reached only
    through the jobs' namespaces); raises `JobsCannotRun`."""
    job_users = os.geteuid() == 0
    problem = data_dir_problem(settings.data_dir.resolve(), job_users=job_users)
    if problem is not None:
        raise JobsCannotRun(problem)
    if not job_users:
        return []
    problem = installation_problem()
    if problem is not None:
        raise JobsCannotRun(problem)
    missing, items = scratch.unavailable(), needed()
    for path, error in probe_as_job_user(settings, items):
        item = next((i for i in items if str(i.path) == path), Needed(path, Path(path)))
        why = why_unreachable(item, missing) if item.path.exists() else None
        raise JobsCannotRun(why or f"a job user cannot use {item.what} ({path}): {error}")
    masked = sorted({d for i in items if (d := unsearchable(i.path)) is not None})
    return [
        f"job users reach the interpreter and Launchbay's code under {d} through their own "
        f"mount namespace only: {d} is not searchable by other users ({_mode(d)}, unchanged)"
        for d in masked
    ]


def probe_as_job_user(settings: Settings, items: list[Needed]) -> list[tuple[str, str]]:
    """(path or module, why) for what a job user, started as a job's launcher is, cannot use;
    empty when it can (or when no job user is free now: the jobs find out)."""
    user = lease_job_user(
        settings.job_user_lease_dir,
        settings.job_users,
        f"worker-start-{os.getpid()}",
        settings.job_user_prefix,
    )
    if user is None:
        log.warning("every job user is in use: the start check runs no probe")
        return []
    user.private_scratch = scratch.unavailable() is None
    run_dir = settings.runs_dir / f".start-check-{os.getpid()}"
    try:
        for sub in ("tmp", "var-tmp"):
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
            os.chown(run_dir / sub, user.uid, user.gid)
            os.chmod(run_dir / sub, 0o700)
        need = {
            "read": [str(i.path) for i in items if not i.run],
            "run": [str(i.path) for i in items if i.run],
            "search": [str(settings.data_dir.resolve()), str(settings.envs_dir)],
            "modules": ["jobs", "torch"],
        }
        return _run_probe(settings, run_dir, (user.uid, user.gid), need)
    finally:
        user.release()
        shutil.rmtree(run_dir, ignore_errors=True)


def _run_probe(
    settings: Settings, run_dir: Path, user: tuple[int, int], need: dict[str, list[str]]
) -> list[tuple[str, str]]:
    argv = [sys.executable, "-I", "-c", PROBE, json.dumps(need)]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(run_dir)}
    pipe: tuple[int, int] | None = None
    if scratch.unavailable() is None:
        pipe = os.pipe()
        keep = scratch.launch_paths(settings.data_dir.resolve(), None)
        private = scratch.PrivateScratch(run_dir, keep=keep)
        argv = private.command(argv, uid=user[0], gid=user[1], env_fd=pipe[0])
    try:
        process = subprocess.Popen(
            argv,
            cwd=run_dir,
            env={} if pipe else env,
            pass_fds=(pipe[0],) if pipe else (),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            user=None if pipe else user[0],
            group=None if pipe else user[1],
            extra_groups=None if pipe else [],
        )
    except PermissionError as exc:
        return [(sys.executable, exc.strerror or str(exc))]
    finally:
        if pipe:
            os.close(pipe[0])
    if pipe:
        with os.fdopen(pipe[1], "wb") as writer:
            writer.write(json.dumps(env).encode())
    try:
        out, err = process.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return [(sys.executable, f"the probe took over {PROBE_TIMEOUT_S:.0f} s")]
    try:
        return [(path, why) for path, why in json.loads(out)]
    except ValueError:
        said = err.decode(errors="replace").strip().splitlines()
        return [(os.path.realpath(sys.executable), said[-1] if said else "it did not run")]
