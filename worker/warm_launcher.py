"""A warm launcher: what a fork of the fork server (`warm_server.py`) becomes for one attempt.

The fork server forks a child per attempt, before it reads anything of the job; the child reads
the launch request from the supervisor's connection (`serve`) and becomes the job's launcher as
a cold start would have it (`become_job`): its own session, the attempt's cgroup (waited for, as
`lifeline.py` does), the cores of its CPU slots, stdin from /dev/null and stdout and stderr to the
attempt's ``launcher.log`` (its file descriptor, passed over the connection), the supervisor's
umask and resource limits, the working directory, the attempt's private scratch (`scratch.py`)
and, last, the job user (no other group). Only then does it start the ranks, each a fresh fork of
itself (`Agent`), which sets for each rank what torchrun's agent sets (`rank_env`), becomes a
session of its own and runs `rank_main.py`'s `main` as ``python rank_main.py ...`` would
(`run_rank`). It restarts every rank together when one fails, up to ``max_restarts`` times, and
ends as torchrun does: 0 when every rank returned 0, else 1 after printing torchrun's failure
summary, which `worker.outcome` reads. SIGTERM, SIGINT, SIGHUP (and the supervisor's connection
closing: its supervisor died) stop the ranks: SIGTERM, then SIGKILL after `STOP_GRACE_S`.

Loaded by path by the fork server (standard library only, like `rank_main.py`).
"""

import json
import os
import resource
import selectors
import signal
import socket
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

# Copies of the contract's names (`jobs.contract.env`); tests/unit/worker/test_standalone_copies.py
# holds them equal.
LAUNCHER_PID_ENV = "LAUNCHBAY_LAUNCHER_PID"
LOCALHOST = "127.0.0.1"
STOP_GRACE_S = 30.0  # torchrun's own, before it SIGKILLs what its SIGTERM left
POLL_S = 0.1  # torchrun's monitor interval
# How long ranks that ended stay unreaped for the supervisor to record them (`Agent._announce`).
RECORD_WAIT_S = 5.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
MAX_REQUEST_BYTES = 64 * 2**20


def read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The launch request: a 4-byte length, then that much JSON; the launcher's output file
    descriptor comes with the first bytes."""
    head, fds, _, _ = socket.recv_fds(conn, 4, 4)
    while len(head) < 4:
        more = conn.recv(4 - len(head))
        if not more:
            raise EOFError("the supervisor went away before its request")
        head += more
    size = int.from_bytes(head, "big")
    if size > MAX_REQUEST_BYTES:
        raise ValueError(f"request of {size} bytes")
    body = bytearray()
    while len(body) < size:
        chunk = conn.recv(min(1 << 20, size - len(body)))
        if not chunk:
            raise EOFError("the supervisor went away during its request")
        body += chunk
    return json.loads(body), list(fds)


def become_job(request: dict[str, Any], output_fd: int, helpers: dict[str, ModuleType]) -> None:
    """This process, still root (or the worker's user), becomes the attempt's launcher, as
    `worker.process_tree.start_launcher` starts one cold (see the module docstring)."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    for fd in {null, output_fd} - {0, 1, 2}:
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    lifeline = helpers["lifeline"]
    lifeline.wait_for_cgroup()
    lifeline.pin_cpus()
    os.umask(int(request["umask"]))
    for name, (soft, hard) in request["rlimits"].items():
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError, AttributeError):
            pass
    os.chdir(request["cwd"])
    private = request.get("scratch")
    if private is not None:
        scratch = helpers["scratch"]
        scratch.enter_namespaces()
        binds = [tuple(pair) for pair in private["binds"]]
        scratch.make_private(binds, private["shm_size"], private["keep"])
        os.chdir(os.getcwd())  # the working directory as the job sees it
    if request.get("uid") is not None:
        helpers["scratch"].become(int(request["uid"]), int(request["gid"]))
        # A change of user makes a process undumpable until its next exec: a cold rank is
        # dumpable again after its exec, and so is this one (the fork server is not).
        helpers["process_block"].set_dumpable(1)
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    title = [sys.executable, "-I", "-u", str(Path(__file__).resolve()), request["run_id"]]
    helpers["process_block"].set_process_block(title, dict(os.environ))


def locale_coerced(env: dict[str, str]) -> dict[str, str]:
    """`env` as a cold launcher's Python passes it on: with ``LC_CTYPE=C.UTF-8`` where the C
    locale would be in force (PEP 538's coercion, which a started interpreter does)."""
    if env.get("LC_ALL") or env.get("LC_CTYPE"):
        return env
    if env.get("LANG", "C") in ("C", "POSIX", ""):
        return {**env, "LC_CTYPE": "C.UTF-8"}
    return env


def rank_env(
    base: dict[str, str], request: dict[str, Any], local_rank: int, restart: int, port: int
) -> dict[str, str]:
    """What torchrun's agent (single node, its store not shared) sets for a rank, over `base`."""
    nproc = int(request["nproc"])
    env = dict(base)
    if nproc > 1 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = "1"
    env.update(
        {
            "LOCAL_RANK": str(local_rank),
            "RANK": str(local_rank),
            "GROUP_RANK": "0",
            "ROLE_RANK": str(local_rank),
            "ROLE_NAME": "default",
            "LOCAL_WORLD_SIZE": str(nproc),
            "WORLD_SIZE": str(nproc),
            "GROUP_WORLD_SIZE": "1",
            "ROLE_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": LOCALHOST,
            "MASTER_PORT": str(port),
            "TORCHELASTIC_RESTART_COUNT": str(restart),
            "TORCHELASTIC_MAX_RESTARTS": str(request["max_restarts"]),
            "TORCHELASTIC_RUN_ID": request["run_id"],
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
            "TORCHELASTIC_ERROR_FILE": str(error_file(request, restart, local_rank)),
        }
    )
    return env


def round_dir(request: dict[str, Any], restart: int) -> Path:
    """torchrun's ``<log dir>/<run id>_<suffix>/attempt_<k>``, which `worker.process_tree`
    counts restarts by."""
    return Path(request["torchelastic_dir"]) / f"{request['run_id']}_warm" / f"attempt_{restart}"


def error_file(request: dict[str, Any], restart: int, local_rank: int) -> Path:
    return round_dir(request, restart) / str(local_rank) / "error.json"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


class Agent:
    """Starts the ranks (forks of this process), watches them, restarts them together, stops
    them on a signal or when the supervisor's connection closes."""

    def __init__(self, request: dict[str, Any], conn: socket.socket, rank_start: Any) -> None:
        self.request, self.conn, self.rank_start = request, conn, rank_start
        self.ranks: dict[int, int] = {}  # pid -> local rank
        self.exits: dict[int, tuple[int, int, float]] = {}  # local rank -> (code, pid, time)
        self.stop_signal: int | None = None
        # Announcements the supervisor has not answered yet, and until when ranks wait for it.
        self.unrecorded, self.record_by = 0, 0.0
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        for number in (*STOP_SIGNALS, signal.SIGCHLD):
            signal.signal(number, self._on_signal)
        signal.set_wakeup_fd(self.wake_w)

    def _on_signal(self, number: int, frame: Any) -> None:
        if number != signal.SIGCHLD and self.stop_signal is None:
            self.stop_signal = number

    def run(self) -> int:
        """The launcher's exit status."""
        max_restarts = int(self.request["max_restarts"])
        base = locale_coerced(dict(os.environ))
        for restart in range(max_restarts + 1):
            failed = self._round(base, restart)
            if self.stop_signal is not None:
                self._stop()
                print(f"[launchbay] warm launcher: stopped by signal {self.stop_signal}")
                return 128 + self.stop_signal
            if not failed:
                return 0
            self._stop()
            if restart < max_restarts:
                left = max_restarts - restart
                print(
                    f"[launchbay] warm launcher: worker group FAILED. {left}/{max_restarts} "
                    "attempts left; will restart worker group",
                    flush=True,
                )
        self._summary()
        return 1

    def _round(self, base: dict[str, str], restart: int) -> bool:
        """Run every rank once; True when one failed (the others still run then)."""
        self.exits.clear()
        port = free_port()
        nproc = int(self.request["nproc"])
        for local_rank in range(nproc):
            round_dir(self.request, restart).joinpath(str(local_rank)).mkdir(
                parents=True, exist_ok=True
            )
        for local_rank in range(nproc):
            env = rank_env(base, self.request, local_rank, restart, port)
            pid = os.fork()
            if pid == 0:
                self._close_in_rank()
                self.rank_start(env, self.request)  # never returns
            self.ranks[pid] = local_rank
        self._announce()
        with selectors.DefaultSelector() as selector:
            selector.register(self.wake_r, selectors.EVENT_READ)
            selector.register(self.conn, selectors.EVENT_READ)
            while True:
                self._reap()
                if any(code != 0 for code, _, _ in self.exits.values()):
                    return True
                if len(self.exits) == nproc:
                    return False
                if self.stop_signal is not None:
                    return True
                for key, _ in selector.select(POLL_S):
                    if key.fileobj is self.conn and not self._read_conn():
                        self.stop_signal = signal.SIGTERM  # the supervisor died: stop
                        selector.unregister(self.conn)
                    elif key.fileobj == self.wake_r:
                        os.read(self.wake_r, 4096)

    def _announce(self) -> None:
        """Tell the supervisor the ranks' PIDs. Ranks that end are left unreaped (zombies,
        still the launcher's children, in their sessions) until it says it has recorded them,
        or for RECORD_WAIT_S: so it records even a rank that ends at once, and the sessions
        its sweep must stop, whatever its load."""
        try:
            self.conn.sendall(json.dumps({"ranks": sorted(self.ranks)}).encode() + b"\n")
        except OSError:
            return  # the supervisor went away: noticed as the ranks are watched
        self.unrecorded += 1
        self.record_by = time.monotonic() + RECORD_WAIT_S

    def _read_conn(self) -> bool:
        """Read the supervisor's answers (a line per announcement recorded); False once the
        connection is closed (then no answer will come)."""
        try:
            said = self.conn.recv(4096, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
        except OSError:
            said = b""
        self.unrecorded = max(0, self.unrecorded - said.count(b"\n")) if said else 0
        return bool(said)

    def _close_in_rank(self) -> None:
        signal.set_wakeup_fd(-1)
        for fd in (self.wake_r, self.wake_w):
            os.close(fd)
        self.conn.close()

    def _reap(self) -> None:
        if self.unrecorded and time.monotonic() < self.record_by:
            return  # the supervisor has yet to record the ranks (`_announce`)
        while self.ranks:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            local_rank = self.ranks.pop(pid, None)
            if local_rank is not None:
                self.exits[local_rank] = (os.waitstatus_to_exitcode(status), pid, time.time())

    def _stop(self) -> None:
        """SIGTERM the ranks still running, SIGKILL them after STOP_GRACE_S; reap them all.
        Their exits are not failures of the round: the first ones are (torchrun's summary)."""
        first = dict(self.exits)
        for pid in self.ranks:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while self.ranks and time.monotonic() < deadline:
            self._read_conn()  # the supervisor's answer, or its end
            self._reap()
            time.sleep(0.05)
        for pid in self.ranks:
            _signal(pid, signal.SIGKILL)
        while self.ranks:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            self.ranks.pop(pid, None)
        self.exits = first

    def _summary(self) -> None:
        """torchrun's ChildFailedError summary: the other failures, then the root cause (the
        first to exit non-zero)."""
        failed = sorted(
            ((code, pid, at, rank) for rank, (code, pid, at) in self.exits.items() if code != 0),
            key=lambda f: f[2],
        )
        if not failed:
            return
        host = socket.gethostname()

        def block(index: int, failure: tuple[int, int, float, int]) -> str:
            code, pid, at, rank = failure
            stamp = time.strftime("%Y-%m-%d_%H:%M:%S", time.localtime(at))
            return (
                f"[{index}]:\n  time      : {stamp}\n  host      : {host}\n"
                f"  rank      : {rank} (local_rank: {rank})\n"
                f"  exitcode  : {code} (pid: {pid})\n  error_file: <N/A>\n"
            )

        others = "".join(block(i + 1, f) for i, f in enumerate(failed[1:])) or (
            "  <NO_OTHER_FAILURES>\n"
        )
        line = "=" * 60
        print(
            f"{line}\nwarm launcher FAILED\n{'-' * 60}\nFailures:\n{others}{'-' * 60}\n"
            f"Root Cause (first observed failure):\n{block(0, failed[0])}{line}",
            flush=True,
        )


def _signal(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


def run_rank(env: dict[str, str], request: dict[str, Any], prepared: dict[str, Any]) -> None:
    """In a fresh fork of the launcher: become a rank as ``python -I -u rank_main.py ...``
    would be one, then run `rank_main.main`, and leave as its interpreter would
    (`rank_exit.leave`)."""
    os.setsid()
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.environ.clear()
    os.environ.update(env)
    entry = list(request["entry"])
    sys.orig_argv = entry
    sys.argv = entry[3:]  # python -I -u rank_main.py ARGS: rank_main.py and its arguments
    sys.path[:] = prepared["path"]
    prepared["helpers"]["process_block"].set_process_block(entry, env)
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # seeded at import, once for every fork: a cold rank seeds its own
        numpy.random.seed()
    try:
        prepared["rank_main"].main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    prepared["helpers"]["rank_exit"].leave(code)


def serve(conn: socket.socket, prepared: dict[str, Any]) -> int:
    """The whole life of a warm launcher in a fork of the server; its exit status."""
    try:
        request, fds = read_request(conn)
        if len(fds) != 1:
            raise ValueError("the request comes with exactly the launcher's output")
    except (OSError, ValueError, EOFError) as exc:
        print(f"warm launcher: no request: {exc}", file=sys.stderr)
        return 2
    become_job(request, fds[0], prepared["helpers"])

    def rank_start(env: dict[str, str], req: dict[str, Any]) -> None:
        run_rank(env, req, prepared)

    return Agent(request, conn, rank_start).run()
