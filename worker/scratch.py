"""A private scratch per attempt: its own ``/tmp``, ``/var/tmp``, ``/dev/shm`` and System V IPC,
gone with the attempt, as Slurm's ``job_container/tmpfs`` gives a job.

    python -I -S scratch.py --uid UID --gid GID --env-fd FD [--bind SOURCE TARGET]...
        [--shm-size BYTES] [--keep PATH]... -- COMMAND [ARGS...]

is what a root worker starts in place of the launcher (`worker.process_tree.start_launcher`). Still
root, it moves into a mount namespace and an IPC namespace of its own (``unshare``), makes the
host's mounts slaves (nothing mounted here reaches the host), mounts each SOURCE (the attempt's
``tmp/`` and ``var-tmp/``, in its run directory) over its TARGET (``/tmp``, ``/var/tmp``) and a
new tmpfs over ``/dev/shm``; then it becomes UID:GID with no other group and execs COMMAND with
the environment read from FD (a JSON object: the root part runs with none of the job's). So:

- a later job under the same uid finds nothing of this one: the namespaces die with the
  attempt's last process, and with them the tmpfs and every segment, semaphore and queue; the
  worker removes ``tmp/`` and ``var-tmp/`` when the attempt ends;
- what the job keeps in /tmp and /var/tmp lies in its run directory, measured with its other
  files against its owner's disk quota; /dev/shm is measured too (`shm_bytes`) and, being
  memory, charged to the attempt's cgroup.

Paths the job needs (KEEP: the data dir, the interpreter, Launchbay's code) that lie under a
covered target (a data dir under /tmp, as in the tests) are mounted back at the same place. So
are those under a directory that other users may not search (a ``0700`` home holding pyenv's,
conda's or uv's Python, or the clone): that directory is covered by an empty tmpfs of its own
(`masks`), in this namespace only, and the job reaches those paths and nothing else of it; the
host's modes never change (`worker.reach` checks at the worker's start that this suffices).
Where the namespaces cannot be made (a root worker in a container without ``CAP_SYS_ADMIN``)
`unavailable` says why: jobs then use the host's directories, and `worker.leftovers` removes
what their uid left when the job user is given back.

Like `lifeline.py` it is run as a script and imports only the standard library.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_SLAVE = 0x2, 0x4, 0x1000, 0x4000, 0x80000
SHM = "/dev/shm"
# (directory in the attempt's run directory, the host path it is mounted over)
SCRATCH_DIRS = (("tmp", "/tmp"), ("var-tmp", "/var/tmp"))
SCRIPT = Path(__file__).resolve()
PROBE_TIMEOUT_S = 10.0


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    def encoded(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    result = _libc().mount(encoded(source), encoded(target), encoded(fstype), flags, encoded(data))
    _check(result, f"mount {target}")


def enter_namespaces() -> None:
    """A mount and an IPC namespace of this process's own; the host's mounts become slaves, so
    what is mounted here from now on stays here."""
    _check(_libc().unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    _mount(None, "/", None, MS_REC | MS_SLAVE)


def _under(path: str, parent: str) -> bool:
    return path.startswith(parent.rstrip("/") + "/")


def masks(paths: Sequence[str], covered: Sequence[str] = ()) -> list[str]:
    """The directories above `paths` that other users may not search (the topmost of each
    path's, none under another or under a `covered` target): what a job user reaches them
    through only in its own namespace."""
    found: list[str] = []
    for path in paths:
        parts = os.path.realpath(path).split("/")[1:-1]
        for depth in range(1, len(parts) + 1):
            directory = "/" + "/".join(parts[:depth])
            if any(_under(directory, t) or directory == t for t in covered):
                break
            try:
                searchable = os.stat(directory).st_mode & 0o001
            except OSError:
                break
            if not searchable:
                found.append(directory)
                break
    return [m for m in sorted(set(found)) if not any(_under(m, o) for o in found)]


def make_private(binds: list[tuple[str, str]], shm_size: int | None, keep: list[str]) -> None:
    """In the new namespaces: each bind's source over its target, a new tmpfs over /dev/shm
    and over each of the `masks` of the `keep` paths, then each `keep` path that those now
    hide, mounted back where it was."""
    targets: list[tuple[str, str]] = []
    for source, target in binds:
        real = os.path.realpath(target)  # /var/tmp may be a link to /tmp: covered once
        if os.path.isdir(real) and real not in (t for _, t in targets):
            targets.append((os.path.realpath(source), real))
    covered = [t for _, t in targets] + ([SHM] if os.path.isdir(SHM) else [])
    hiding = masks(keep, covered)
    covered += hiding
    kept = _hidden(keep, covered)
    # Below a path mounted back, a directory others may not search (a 0700 home in a clone
    # under /tmp) is masked in turn, and what it hides of `keep` mounted back too.
    inner = masks_below(keep, kept)
    kept_inner = _hidden(keep, inner)
    # Opened first: a source or a kept path may lie under a target, hidden once it is covered.
    flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
    sources = [(os.open(source, flags), target) for source, target in targets]
    backs = [(os.open(path, os.O_PATH | os.O_DIRECTORY), path) for path in kept]
    inner_backs = [(os.open(path, os.O_PATH | os.O_DIRECTORY), path) for path in kept_inner]
    for fd, target in sources:
        _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
    if SHM in covered:
        size = f",size={shm_size}" if shm_size else ""
        _mount("tmpfs", SHM, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777{size}")
    for directories, mounted_back in ((hiding, backs), (inner, inner_backs)):
        for directory in directories:
            _mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0711,size=1m")
        for fd, path in mounted_back:
            os.makedirs(path, mode=0o711, exist_ok=True)  # in the new mount, root's
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    for fd, _ in sources + backs + inner_backs:
        os.close(fd)


def _hidden(keep: Sequence[str], covered: Sequence[str]) -> list[str]:
    """The directories of `keep` under a `covered` one, none under another."""
    found: list[str] = []
    for path in sorted({os.path.realpath(k) for k in keep}):
        hidden = any(_under(path, t) for t in covered)
        if hidden and os.path.isdir(path) and not any(_under(path, k) for k in found):
            found.append(path)
    return found


def masks_below(paths: Sequence[str], roots: Sequence[str]) -> list[str]:
    """The directories strictly between one of `roots` and a path of `paths` under it that
    other users may not search (the topmost of each path's)."""
    found: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        root = next((r for r in roots if _under(real, r)), None)
        if root is None:
            continue
        parts = real[len(root) :].split("/")[1:-1]
        for depth in range(1, len(parts) + 1):
            directory = root + "/" + "/".join(parts[:depth])
            try:
                if not os.stat(directory).st_mode & 0o001:
                    found.append(directory)
                    break
            except OSError:
                break
    return [m for m in sorted(set(found)) if not any(_under(m, o) for o in found)]


def become(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scratch.py")
    parser.add_argument("--probe", action="store_true", help="only try the namespaces")
    parser.add_argument("--uid", type=int)
    parser.add_argument("--gid", type=int)
    parser.add_argument("--env-fd", type=int)
    parser.add_argument("--bind", nargs=2, action="append", default=[])
    parser.add_argument("--shm-size", type=int)
    parser.add_argument("--keep", action="append", default=[])
    return parser


def main(argv: list[str]) -> None:
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = _parser().parse_args(argv[:split]), argv[split + 1 :]
    try:
        if args.probe:
            enter_namespaces()
            make_private([], None, [])
            return
        if args.uid is None or args.gid is None or args.env_fd is None or not command:
            raise SystemExit("usage: scratch.py --uid U --gid G --env-fd FD ... -- COMMAND")
        with os.fdopen(args.env_fd, "rb") as pipe:
            env = json.loads(pipe.read())
        enter_namespaces()
        make_private([tuple(pair) for pair in args.bind], args.shm_size, args.keep)
        os.chdir(os.getcwd())  # the working directory as the job sees it
        become(args.uid, args.gid)
    except OSError as exc:
        why = f"launchbay: cannot give the job a private /tmp and /dev/shm: {exc}"
        raise SystemExit(why) from None
    os.execvpe(command[0], command, env)


# The worker's side.


@lru_cache
def unavailable() -> str | None:
    """None when attempts get a private scratch here; else why not (once per process: the
    namespaces are tried in a child)."""
    if os.geteuid() != 0:
        return "the worker is not root"
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", str(SCRIPT), "--probe"],
            capture_output=True,
            text=True,
            env={},
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the namespaces could not be tried: {exc}"
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


@dataclass(frozen=True)
class PrivateScratch:
    """An attempt's private scratch: its run directory's `SCRATCH_DIRS`, a tmpfs of at most
    `shm_size` bytes (None: the kernel's default, half the memory), and the paths to `keep`."""

    run_dir: Path
    shm_size: int | None = None
    keep: tuple[Path, ...] = ()

    def command(self, argv: list[str], *, uid: int, gid: int, env_fd: int) -> list[str]:
        """`argv` run by this script as `uid`:`gid`, with the environment written to `env_fd`."""
        options = ["--uid", str(uid), "--gid", str(gid), "--env-fd", str(env_fd)]
        for name, target in SCRATCH_DIRS:
            options += ["--bind", str(self.run_dir / name), target]
        if self.shm_size:
            options += ["--shm-size", str(self.shm_size)]
        for path in self.keep:
            options += ["--keep", str(path)]
        return [sys.executable, "-I", "-S", str(SCRIPT), *options, "--", *argv]


def interpreter_libraries() -> list[Path]:
    """The shared libpython this interpreter runs on, if it has one (a build with
    ``--enable-shared``, as pyenv's and conda's may be, finds it by a path written into the
    binary, which need not lie beside it)."""
    try:
        with open("/proc/self/maps") as maps:
            mapped = {line.split(maxsplit=5)[-1].strip() for line in maps if "/libpython" in line}
    except OSError:
        return []
    return sorted(Path(path) for path in mapped if path.startswith("/") and os.path.isfile(path))


def launch_paths(data_dir: Path, cwd: Path | None) -> tuple[Path, ...]:
    """What a launch reads or writes outside its scratch: the data dir, this interpreter (and
    its libpython), its packages and Launchbay's own code, and the working directory."""
    places = [data_dir, Path(sys.prefix), Path(sys.base_prefix), SCRIPT.parents[1]]
    places.append(Path(os.path.realpath(sys.executable)).parent)
    places += [Path(p) for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    places += [library.parent for library in interpreter_libraries()]
    return tuple(places + ([cwd] if cwd is not None else []))


def shm_bytes(pid: int) -> int:
    """Bytes held in the /dev/shm that process `pid` sees, when it is not the worker's own (0
    then, or when it cannot be read)."""
    try:
        theirs = os.statvfs(f"/proc/{pid}/root{SHM}")
        if os.stat(f"/proc/{pid}/root{SHM}").st_dev == os.stat(SHM).st_dev:
            return 0
    except OSError:
        return 0
    return (theirs.f_blocks - theirs.f_bfree) * theirs.f_frsize


if __name__ == "__main__":
    main(sys.argv[1:])
