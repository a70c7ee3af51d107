"""The worker's fork servers (`warm_server.py`): one per job environment it served recently.

A server is named by what its interpreter fixes when torch is imported: the environment's Python
and the variables read then (`import_time_env`: the loader's, the allocator's, the thread pools',
the locale, torch's own). A rank whose environment gives the same values is started from it; a
job whose own `env` sets one of them goes cold (`worker.launch_path`), so a server's environment
is always the worker's own: nothing of a job's, no secret of the worker's (what
`worker.passed_env` gives every rank, filtered to those names).

Servers live in a directory of the worker's own (``<job user lease dir>/../warm/<worker pid>``,
0700, or under the temporary directory where that cannot be made), as ``<key>.sock`` (answering
only the worker's uid) with ``<key>.json`` once ready; they exit with the worker (they watch its
PID) or after `Settings.warm_idle_s` without a launch. Any horse of the worker may start one;
``<key>.lock`` makes the others wait for it.
"""

import fcntl
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SERVER = Path(__file__).resolve().with_name("warm_server.py")
NO_TORCH_EXIT = 3  # `warm_server.NO_TORCH_EXIT`
START_TIMEOUT_S = 120.0
# Read by an interpreter, or the libraries torch loads, as they start or are imported.
IMPORT_TIME_PREFIXES = (
    "LD_",
    "MALLOC_",
    "GLIBC_",
    "OMP_",
    "MKL_",
    "KMP_",
    "GOMP_",
    "OPENBLAS_",
    "DNNL_",
    "ONEDNN_",
    "LC_",
    "TORCH",
    "PYTORCH_",
)
IMPORT_TIME_NAMES = frozenset({"LANG", "LANGUAGE", "TZ"})
# torch reads these when a process group or NCCL starts, not at import: per job, as set.
RUN_TIME_PREFIXES = (
    "TORCH_NCCL_",
    "TORCHELASTIC_",
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
    "TORCH_EXTENSIONS_DIR",
)


class WarmUnavailable(Exception):
    """No fork server for this environment; the message says why (the job goes cold)."""


def read_at_import(name: str) -> bool:
    """Whether `name` is read when torch is imported (and so fixed in a fork server)."""
    if name.startswith(RUN_TIME_PREFIXES):
        return False
    return name in IMPORT_TIME_NAMES or name.startswith(IMPORT_TIME_PREFIXES)


def import_time_env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if read_at_import(name)}


def server_env(rank_env: Mapping[str, str]) -> dict[str, str]:
    """The fork server's whole environment for ranks whose environment is `rank_env`."""
    env = import_time_env(rank_env)
    if "PATH" in rank_env:
        env["PATH"] = rank_env["PATH"]
    return env


def server_key(python: str, env: Mapping[str, str]) -> str:
    text = json.dumps([python, sorted(import_time_env(env).items())])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class WarmServer:
    """A ready fork server."""

    socket: Path
    pid: int
    python: str
    # Top-level names of the modules it has imported: a program's own module of one of these
    # names would not be the one it imports (`worker.launch_path.shadowed`).
    modules: frozenset[str]
    cuda_initialized: bool


def pool_directory(lease_dir: Path, watch_pid: int) -> Path:
    """The worker's own directory for its servers' sockets (0700, the worker's; refused when
    someone else made it)."""
    for base in (lease_dir.parent / "warm", Path(tempfile.gettempdir()) / f"lb-warm-{os.getuid()}"):
        directory = base / str(watch_pid)
        if not _made(base, directory):
            continue
        info = os.lstat(directory)
        base_info = os.lstat(base)
        if any(i.st_uid != os.geteuid() or i.st_mode & 0o077 for i in (info, base_info)):
            continue
        return directory
    raise WarmUnavailable("no private directory for the fork servers' sockets")


def _made(base: Path, directory: Path) -> bool:
    """Whether `directory` in `base` (both 0700) is there now, made as needed: tried again when
    another worker's `WarmPool.close` removed `base` in between; False when it cannot be made
    (someone else's `base`, say)."""
    for _ in range(2):
        try:
            base.mkdir(parents=True, exist_ok=True, mode=0o700)
            directory.mkdir(exist_ok=True, mode=0o700)
            return True
        except FileNotFoundError:
            continue
        except OSError:
            return False
    return False


class WarmPool:
    """The fork servers of one worker (`watch_pid`), in `directory`."""

    def __init__(self, directory: Path, watch_pid: int, idle_s: float) -> None:
        self.directory, self.watch_pid, self.idle_s = directory, watch_pid, idle_s

    def server(self, python: str, rank_env: Mapping[str, str]) -> WarmServer:
        """The ready server for ranks run by `python` with `rank_env`, started (and waited for)
        when there is none; WarmUnavailable when it cannot be had."""
        key = server_key(python, rank_env)
        refused = self.directory / f"{key}.refused"
        if refused.exists():
            raise WarmUnavailable(refused.read_text())
        ready = self._ready(key)
        if ready is not None:
            return ready
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock_fd = os.open(self.directory / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)  # another horse may be starting it
            ready = self._ready(key)
            if ready is not None:
                return ready
            return self._start(key, python, rank_env)
        finally:
            os.close(lock_fd)

    def _ready(self, key: str) -> WarmServer | None:
        try:
            info = json.loads((self.directory / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        sock = self.directory / f"{key}.sock"
        if not _alive(int(info["pid"])) or not sock.exists():
            return None
        if not info.get("process_block"):
            raise WarmUnavailable(
                "this kernel lets no fork show its own environment (prctl PR_SET_MM_MAP)"
            )
        return WarmServer(
            sock,
            int(info["pid"]),
            str(info["python"]),
            frozenset(info["modules"]),
            bool(info["cuda_initialized"]),
        )

    def start(self, python: str, rank_env: Mapping[str, str]) -> None:
        """Start the server for `python` and `rank_env` if none is there or starting, without
        waiting for it (the worker's own environment's, as the worker starts)."""
        key = server_key(python, rank_env)
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock_fd = os.open(self.directory / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            if self._ready(key) is None and self._starting(key) is None:
                self._spawn(key, python, rank_env)
        except WarmUnavailable as exc:
            log.warning("no fork server for %s: %s", python, exc)
        finally:
            os.close(lock_fd)

    def _starting(self, key: str) -> int | None:
        """The PID of the server for `key` that was started and is not ready yet, if alive."""
        try:
            pid = int((self.directory / f"{key}.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def _spawn(self, key: str, python: str, rank_env: Mapping[str, str]) -> int:
        sock, ready = self.directory / f"{key}.sock", self.directory / f"{key}.json"
        for stale in (sock, ready):
            with suppress(FileNotFoundError):
                stale.unlink()
        argv = [python, "-I", "-u", str(SERVER), "--socket", str(sock), "--ready", str(ready)]
        argv += ["--watch", str(self.watch_pid), "--idle-s", str(self.idle_s)]
        output = os.open(
            self.directory / f"{key}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
        )
        try:
            process = subprocess.Popen(
                argv,
                env=server_env(rank_env),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                cwd="/",
                start_new_session=True,
            )
        except OSError as exc:
            raise WarmUnavailable(f"the fork server could not start: {exc}") from None
        finally:
            os.close(output)
        (self.directory / f"{key}.pid").write_text(str(process.pid))
        return process.pid

    def _start(self, key: str, python: str, rank_env: Mapping[str, str]) -> WarmServer:
        """The server for `key`, started unless it is starting already, once ready."""
        started = time.monotonic()
        pid = self._starting(key) or self._spawn(key, python, rank_env)
        while time.monotonic() - started < START_TIMEOUT_S:
            found = self._ready(key)
            if found is not None:
                log.info("fork server %s (%s) ready after %.2f s", found.pid, python,
                         time.monotonic() - started)  # fmt: skip
                return found
            code = _exit_code(pid)
            if code is not None:
                why = f"the fork server of {python} exited with {code}"
                if code == NO_TORCH_EXIT:
                    why = f"the environment's Python ({python}) cannot import torch"
                    (self.directory / f"{key}.refused").write_text(why)
                raise WarmUnavailable(why)
            time.sleep(0.02)
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        raise WarmUnavailable(f"the fork server of {python} was not ready in {START_TIMEOUT_S} s")

    def close(self) -> None:
        """Stop every server of this pool and remove its directory (the worker's end)."""
        for ready in self.directory.glob("*.json"):
            with suppress(OSError, ValueError, KeyError, ProcessLookupError):
                os.kill(int(json.loads(ready.read_text())["pid"]), signal.SIGTERM)
        for path in self.directory.iterdir():
            with suppress(OSError):
                path.unlink()
        with suppress(OSError):
            self.directory.rmdir()
        with suppress(OSError):  # the workers' common directory, left by the last of them
            self.directory.parent.rmdir()


def _exit_code(pid: int) -> int | None:
    """The exit status of `pid` once it has ended (our child: reaped here; else -1), or None
    while it runs."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None if _alive(pid) else -1
    return os.waitstatus_to_exitcode(status) if done else None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def connect(server: WarmServer, timeout_s: float = 10.0) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout_s)
    try:
        conn.connect(str(server.socket))
    except OSError as exc:
        conn.close()
        raise WarmUnavailable(f"the fork server does not answer: {exc}") from None
    return conn
