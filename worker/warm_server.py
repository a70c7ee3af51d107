"""The fork server: a ready interpreter, `torch` imported and CUDA untouched, that forks one warm
launcher per attempt (`warm_launcher.py`).

    python -I -u warm_server.py --socket PATH --ready PATH --watch PID --idle-s SECONDS

started by `worker.warm_pool` with an environment of the worker's own that holds no secret (what
a rank's interpreter reads when torch is imported, `worker.warm_pool.server_env`), as the worker's
user (root, where jobs run as job users). It

- imports torch and the modules most programs import next (`PRELOAD`, as far as found), never
  initialising CUDA (nothing here asks for a device; `ready` says `cuda_initialized`), and loads
  Launchbay's rank scripts by path (`rank_main.py`, `lifeline.py`, `scratch.py`...);
- is not dumpable (``PR_SET_DUMPABLE`` 0): no other user can read its memory or environment
  through /proc or ptrace, whatever their uid;
- listens on a Unix socket in a directory only its user may enter, and answers only peers of its
  own uid (``SO_PEERCRED``);
- for each connection, forks first and reads nothing: the child reads the request itself
  (`warm_launcher.serve`), so no job's request, environment or code ever lives in this process;
  it sends the child's PID, then its exit status when it ends (one JSON object per line);
- never runs job code, and exits when the process it watches (the worker) exits, or after
  `--idle-s` without a launch and with no launcher left.

Standard library only besides what it preloads; run by path, like `rank_main.py`.
"""

import argparse
import gc
import importlib
import importlib.util
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
import weakref
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
# Imported before any fork (numpy's global random state is seeded again in each rank).
PRELOAD = ("torch", "torch.distributed", "torch.nn", "torch.optim", "torch.utils.data", "numpy")
HELPERS = (
    "rank_main",
    "rank_child",
    "rank_group",
    "lifeline",
    "scratch",
    "process_block",
    "warm_launcher",
    "rank_exit",
)
NO_TORCH_EXIT = 3


def load(name: str) -> ModuleType:
    """A script of this directory under the private name `rank_child.load_sibling` uses."""
    private = f"_launchbay_{name}"
    spec = importlib.util.spec_from_file_location(private, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[private] = module
    spec.loader.exec_module(module)
    return module


def preload() -> list[str]:
    """Import `PRELOAD` (torch is required: exit NO_TORCH_EXIT without it); the top-level names
    of every module now imported."""
    try:
        importlib.import_module("torch")
    except Exception as exc:
        print(f"torch cannot be imported: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(NO_TORCH_EXIT) from None
    for name in PRELOAD[1:]:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    return sorted({name.partition(".")[0] for name in sys.modules if not name.startswith("_")})


def prepare_ranks(helpers: dict[str, ModuleType]) -> None:
    """Do now, once, what every rank would do the same: load Launchbay's capture package
    (`rank_main.load_capture`), wrap torch.distributed's group functions (`rank_group.wrap`,
    which scans every module loaded), and keep the `weakref.finalize` callbacks of what this
    server imported from running at a rank's exit. Those are torch's operator libraries
    unregistering their kernels: 28 ms of CPU and 6,600 page faults a rank, for a process about
    to end (docs/training-scripts.md). A program's own finalizers still run
    (`rank_exit.leave`)."""
    try:
        helpers["rank_main"].load_capture()
    except Exception as exc:  # each rank tries again, and says why it cannot
        print(f"capture not preloaded: {type(exc).__name__}: {exc}", file=sys.stderr)
    c10d = sys.modules.get(helpers["rank_group"].MODULE)
    try:
        if c10d is not None:
            helpers["rank_group"].wrap(c10d)
    except Exception as exc:  # each rank wraps them then
        print(f"process groups not prepared: {type(exc).__name__}: {exc}", file=sys.stderr)
    for finalizer in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        finalizer.atexit = False


def can_set_process_block(launcher: ModuleType) -> bool:
    """Whether a fork may show its own command line and environment (`set_process_block`)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0 if launcher.set_process_block([sys.executable], {}) else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def cuda_initialized() -> bool:
    torch = sys.modules["torch"]
    return bool(torch.cuda.is_initialized())


def peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def send_line(conn: socket.socket, record: dict[str, Any]) -> None:
    try:
        conn.sendall(json.dumps(record).encode() + b"\n")
    except OSError:
        pass  # the supervisor went away; the launcher notices and stops its ranks


class Server:
    def __init__(self, args: argparse.Namespace, prepared: dict[str, Any]) -> None:
        self.args, self.prepared = args, prepared
        self.pid = os.getpid()
        self.children: dict[int, socket.socket] = {}
        self.last_launch = time.monotonic()
        old = os.umask(0o077)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(args.socket)
        os.umask(old)
        self.listener.listen(64)
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.signal(signal.SIGCHLD, lambda n, f: None)
        signal.signal(signal.SIGTERM, self._terminate)
        signal.set_wakeup_fd(wake_w)
        self.watch = os.pidfd_open(args.watch) if args.watch else None
        self.done = False

    def _terminate(self, number: int, frame: Any) -> None:
        self.done = True

    def serve_forever(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.listener, selectors.EVENT_READ)
            selector.register(self.wake_r, selectors.EVENT_READ)
            if self.watch is not None:
                selector.register(self.watch, selectors.EVENT_READ)
            while not self.done:
                for key, _ in selector.select(1.0):
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fileobj == self.wake_r:
                        os.read(self.wake_r, 4096)
                    elif key.fileobj == self.watch:
                        self.done = True  # the worker is gone
                self._reap()
                idle = time.monotonic() - self.last_launch
                if not self.children and idle >= self.args.idle_s:
                    self.done = True

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        if peer_uid(conn) != os.geteuid():
            conn.close()  # only the worker's own user may ask for a launch
            return
        self.last_launch = time.monotonic()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._become_launcher(conn)
        self.children[pid] = conn
        send_line(conn, {"pid": pid})

    def _become_launcher(self, conn: socket.socket) -> None:
        """In the fork: drop what is the server's, then serve the one attempt; never returns
        (a rank forked below leaves by the interpreter's exit instead)."""
        launcher = os.getpid()
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for number in (signal.SIGCHLD, signal.SIGTERM):
                signal.signal(number, signal.SIG_DFL)
            self.listener.close()
            os.close(self.wake_r)
            if self.watch is not None:
                os.close(self.watch)
            for other in self.children.values():
                other.close()
            code = self.prepared["helpers"]["warm_launcher"].serve(conn, self.prepared)
        finally:
            if os.getpid() == launcher:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                send_line(conn, {"exit": os.waitstatus_to_exitcode(status)})
                conn.close()

    def close(self) -> None:
        if os.getpid() != self.pid:
            return  # a launcher or a rank leaving: the server's files are not theirs
        for conn in self.children.values():
            conn.close()
        for path in (self.args.socket, self.args.ready):
            try:
                os.unlink(path)
            except OSError:
                pass


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="warm_server.py")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--watch", type=int, default=0)
    parser.add_argument("--idle-s", type=float, default=600.0)
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse(argv)
    path = list(sys.path)  # what `python -I rank_main.py` starts with
    helpers = {name: load(name) for name in HELPERS}
    helpers["process_block"].set_dumpable(0)
    process_block = can_set_process_block(helpers["process_block"])
    modules = preload()
    prepare_ranks(helpers)
    # What the server holds is never garbage: no collection in it or in a fork walks it, none
    # writes to the pages a fork shares, and a rank's `gc.get_objects()` lists its own alone.
    gc.collect()
    gc.freeze()
    prepared = {"helpers": helpers, "path": path, "rank_main": helpers["rank_main"]}
    server = Server(args, prepared)
    try:
        ready = {
            "pid": os.getpid(),
            "python": sys.executable,
            "cuda_initialized": cuda_initialized(),
            "process_block": process_block,
            "modules": modules,
        }
        temp = f"{args.ready}.tmp"
        Path(temp).write_text(json.dumps(ready))
        os.replace(temp, args.ready)
        server.serve_forever()
    finally:
        server.close()


if __name__ == "__main__":
    main(sys.argv[1:])
