"""Starting an attempt's ranks warm: the request a fork server's launcher reads
(`warm_launcher.py`), and the launcher as the supervisor sees it (`WarmProcess`, in a
`ProcessTree` like torchrun's `Popen`).

The supervisor connects to the server, sends the request with the launcher's output file (its
descriptor, over the socket), reads the launcher's PID, puts it in the attempt's cgroup (the
launcher waits for that before it does anything of the job's), and from then on treats it as it
treats torchrun: signals to its process group, the process tree under it, its exit status (which
the server sends when it reaps it). Closing the connection (the supervisor died) makes the
launcher stop the ranks, as the lifeline's SIGTERM makes torchrun.
"""

import json
import logging
import os
import resource
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from jobs.contract import env as rank_env
from jobs.spec import JobSpec
from jobs.states import AttemptRef
from service.db import session_scope
from service.records import AttemptSuperseded, add_attempt_event, record_launch_path
from service.settings import Settings
from worker.cgroups import JobCgroup
from worker.launch import LaunchPlan, RunPaths, build_env
from worker.launch_path import COLD, LaunchChoice, shadowed
from worker.process_table import proc_stat
from worker.process_tree import ProcessTree, start_launcher
from worker.scratch import SCRATCH_DIRS, PrivateScratch
from worker.warm_pool import WarmPool, WarmServer, WarmUnavailable, connect

log = logging.getLogger(__name__)
RLIMITS = tuple(name for name in dir(resource) if name.startswith("RLIMIT_"))
PID_TIMEOUT_S = 10.0


def warm_request(
    plan: LaunchPlan,
    env: dict[str, str],
    user: tuple[int, int] | None,
    scratch: PrivateScratch | None,
) -> dict[str, Any]:
    """What the launcher needs, including what a cold start inherits from the supervisor
    (umask, resource limits)."""
    umask = os.umask(0)
    os.umask(umask)
    private = None
    if scratch is not None:
        private = {
            "binds": [[str(scratch.run_dir / name), target] for name, target in SCRATCH_DIRS],
            "shm_size": scratch.shm_size,
            "keep": [str(path) for path in scratch.keep],
        }
    return {
        "entry": list(plan.entry),
        "nproc": plan.expected_ranks,
        "max_restarts": plan.max_restarts,
        "run_id": plan.run_id,
        "torchelastic_dir": str(plan.torchelastic_dir),
        "env": env,
        "cwd": str(plan.cwd),
        "uid": None if user is None else user[0],
        "gid": None if user is None else user[1],
        "scratch": private,
        "umask": umask,
        "rlimits": {name: list(resource.getrlimit(getattr(resource, name))) for name in RLIMITS},
    }


# What a launcher's word may add to the supervisor's work: the rank PIDs it may announce (each
# is looked up once), and the answers it gets at a time.
MAX_ANNOUNCED = 4096
MAX_ANSWERS = 64


class WarmProcess:
    """A warm launcher, as `subprocess.Popen` offers torchrun to `ProcessTree`: its PID and,
    once the server has reaped it, its exit status."""

    def __init__(self, conn: socket.socket, pid: int, buffered: bytes) -> None:
        self.conn, self.pid, self.buffer = conn, pid, buffered
        self.returncode: int | None = None
        self.announced: list[int] = []  # the ranks' PIDs, as the launcher forks them
        self.unanswered = 0  # announcements read and not yet answered (`recorded`)
        self.conn.setblocking(False)
        self.poll()  # the lines read with the PID

    @property
    def exit_fd(self) -> int | None:
        """Readable once there is more to read: the ranks' PIDs (from the launcher), the
        launcher's exit status (from the server)."""
        return None if self.returncode is not None else self.conn.fileno()

    def recorded(self) -> None:
        """Tell the launcher that the ranks it announced are recorded, a line per announcement:
        it holds off reaping those that end until then (`warm_launcher.Agent._announce`)."""
        if not self.unanswered or self.returncode is not None:
            return
        try:  # one announcement a round from a launcher of ours: a flood gets a few lines
            self.conn.send(b"recorded\n" * min(self.unanswered, MAX_ANSWERS))
        except OSError:
            pass  # gone: it reaps them after its wait
        self.unanswered = 0

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        ended = False
        while not ended:
            try:
                chunk = self.conn.recv(4096)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            self.buffer += chunk
            ended = not chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            message = _message(line)
            if type(message.get("exit")) is int:
                self.returncode = message["exit"]
            ranks = message.get("ranks")  # the launcher's word: it runs as the job user
            if isinstance(ranks, list) and len(self.announced) < MAX_ANNOUNCED:
                pids = [p for p in ranks if type(p) is int and p > 1]
                self.announced.extend(pids[: MAX_ANNOUNCED - len(self.announced)])
                self.unanswered += 1
        if self.returncode is None and ended and proc_stat(self.pid) is None:
            self.returncode = -1  # the server went away without telling how it ended
        if self.returncode is not None:
            self.conn.close()
        return self.returncode


def _message(line: bytes) -> dict[str, Any]:
    """A line from the connection: the server's, or the launcher's (the job user's process, so
    anything), which is ignored unless it is a JSON object."""
    try:
        message = json.loads(line)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}


def start_warm_launcher(
    plan: LaunchPlan,
    server: WarmServer,
    output: Path,
    pids_file: Path | None = None,
    cgroup: JobCgroup | None = None,
    user: tuple[int, int] | None = None,
    scratch: PrivateScratch | None = None,
) -> ProcessTree:
    """`start_launcher`'s warm twin (same arguments, and the server to fork from)."""
    env = plan.env if cgroup is None else {**plan.env, rank_env.CGROUP: cgroup.launcher_env}
    body = json.dumps(warm_request(plan, env, user, scratch)).encode()
    output.parent.mkdir(parents=True, exist_ok=True)
    out_fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    conn = connect(server, PID_TIMEOUT_S)
    try:
        socket.send_fds(conn, [len(body).to_bytes(4, "big")], [out_fd])
        conn.sendall(body)
        pid, buffered = _forked_pid(conn)
    except OSError as exc:
        conn.close()
        raise WarmUnavailable(f"the fork server did not start a launcher: {exc}") from None
    except BaseException:
        conn.close()
        raise
    finally:
        os.close(out_fd)
    if cgroup is not None:
        cgroup.add(pid)
    return ProcessTree(WarmProcess(conn, pid, buffered), pids_file, cgroup, server_pid=server.pid)


def _forked_pid(conn: socket.socket) -> tuple[int, bytes]:
    """The launcher's PID, which the server sends as it forks, and the lines read with it (the
    launcher's own, such as its ranks' PIDs, may come first)."""
    buffered, early = b"", b""
    while True:
        while b"\n" not in buffered:
            chunk = conn.recv(4096)
            if not chunk:
                raise WarmUnavailable("the fork server closed the connection before forking")
            buffered += chunk
        line, _, buffered = buffered.partition(b"\n")
        message = json.loads(line)
        if "pid" in message:
            return int(message["pid"]), early + buffered
        early += line + b"\n"


def effective_rank_env(plan: LaunchPlan) -> dict[str, str]:
    """The variables a rank's interpreter reads at import as its launcher gives them (torchrun
    adds ``OMP_NUM_THREADS=1`` for several ranks, its Python the C.UTF-8 locale where none is
    set; `warm_launcher.rank_env` and `locale_coerced` do the same)."""
    env = dict(plan.env)
    if plan.expected_ranks > 1 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = "1"
    if (
        not env.get("LC_ALL")
        and not env.get("LC_CTYPE")
        and env.get("LANG", "C") in ("C", "POSIX", "")
    ):
        env["LC_CTYPE"] = "C.UTF-8"
    return env


def default_rank_env(data_dir: Path, cuda_available: bool, pass_env: list[str]) -> dict[str, str]:
    """What the ranks of a job that sets nothing read at import on this worker: the key of the
    fork server the worker starts as it starts."""
    spec = JobSpec(name="warm-up", recipe="synthetic")
    paths = RunPaths.for_attempt(data_dir, "warm-up", 1)
    env = build_env(
        spec,
        job_id="warm-up",
        attempt=1,
        paths=paths,
        resume_from=None,
        cuda_available=cuda_available,
        base_env=dict(os.environ),
        pass_env=pass_env,
    )
    return effective_rank_env(LaunchPlan([], env, paths.work_dir, spec.nproc_per_node))


@contextmanager
def warm_servers(pool: WarmPool | None, settings: Settings, cuda_available: bool) -> Iterator[None]:
    """A worker's life with its fork servers: the one of its own environment started as it
    starts (not waited for), for jobs that set nothing torch reads at import; all stopped as it
    ends."""
    if pool is None:
        yield
        return
    env = default_rank_env(settings.data_dir.resolve(), cuda_available, settings.job_pass_env)
    pool.start(sys.executable, env)
    try:
        yield
    finally:
        if os.getpid() == pool.watch_pid:  # not in a forked child leaving
            pool.close()


def program_dir(plan: LaunchPlan) -> Path:
    """The directory first on the program's `sys.path`: its script's, or the working one."""
    entry = list(plan.entry)
    if "--script" in entry:
        return Path(entry[entry.index("--script") + 1]).parent
    return plan.cwd


def start_ranks(
    plan: LaunchPlan,
    choice: LaunchChoice,
    pool: WarmPool | None,
    output: Path,
    pids_file: Path | None = None,
    cgroup: JobCgroup | None = None,
    user: tuple[int, int] | None = None,
    scratch: PrivateScratch | None = None,
) -> tuple[ProcessTree, LaunchChoice]:
    """The ranks started warm when `choice` and the fork server allow, else cold; the path
    taken (with why cold) is said first in the launcher's log."""
    if choice.warm and pool is not None:
        try:
            server = pool.server(plan.entry[0], effective_rank_env(plan))
            hidden = shadowed(program_dir(plan), server.modules)
            if not hidden:
                _say(output, "[launchbay] warm start: ranks forked from the fork server")
                tree = start_warm_launcher(plan, server, output, pids_file, cgroup, user, scratch)
                return tree, choice
            names = ", ".join(hidden)
            choice = LaunchChoice(COLD, f"the program's directory holds {names}, a module the "
                                        "fork server has imported")  # fmt: skip
        except WarmUnavailable as exc:
            choice = LaunchChoice(COLD, str(exc))
    _say(output, f"[launchbay] cold start (torchrun): {choice.reason}")
    return start_launcher(plan, output, pids_file, cgroup, user, scratch), choice


def _say(output: Path, line: str) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def record_launch(engine: Engine, ref: AttemptRef, choice: LaunchChoice) -> None:
    """The path on the job's record (`launch_path`) and, with why it went cold, in its history
    (a `launch_path` event)."""
    log.info("%s: %s start%s", ref, choice.path, f" ({choice.reason})" if choice.reason else "")
    with session_scope(engine) as session:
        if ref.node is None or ref.node == 0:
            record_launch_path(session, ref.job_id, ref.attempt, choice.path)
        try:
            data = {"path": choice.path, "reason": choice.reason, "node": ref.node or 0}
            add_attempt_event(session, ref.job_id, "launch_path", ref.attempt, data)
        except AttemptSuperseded:
            pass
