"""A control group per attempt (per node of it): what confines a job's processes and finds them
all, whatever they fork, `setsid` or re-parent to (as Slurm's ``proctrack/cgroup`` does).

The worker makes ``<its own cgroup>/launchbay/<job>-<attempt>[-node<k>]`` in every hierarchy
it can write: cgroup v2 (one unified tree, as on most production hosts) or cgroup v1's
``memory`` and ``pids`` controllers (as on this project's CI machines). The launcher is put in
it before it runs anything (`lifeline.py` waits until it is in), and every process it starts is
born inside. The limits are the cgroup's: ``memory.max`` / ``memory.limit_in_bytes`` (the
spec's `memory_limit_bytes`) and ``pids.max`` (tasks, threads included). At every attempt end
whatever is left in the cgroup is SIGKILLed and the cgroup removed.

Where no hierarchy is writable (a worker not root, an unprivileged container), there is no
cgroup: limits are not enforced, processes are found as before (`worker.process_tree`), and the
worker says so at start (`describe_support`). Under cgroup v2 the controllers need delegating
(``+memory +pids`` in the parent's ``cgroup.subtree_control``); where that is refused the
cgroup still finds the processes but enforces no limit.
"""

import logging
import os
import signal
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("pids", "memory")
PARENT = "launchbay"


@dataclass(frozen=True)
class Hierarchy:
    """One place a job cgroup is made: the directory its job cgroups go under (our own cgroup's
    ``launchbay/``), its controller (``unified`` for v2) and our cgroup's path in it."""

    controller: str
    base: Path
    own_path: str


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per controller (``unified`` for v2), from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else ["unified"]:
                paths[controller] = path
    except (OSError, ValueError):
        pass
    return paths


@lru_cache
def detect_hierarchies(root: Path = CGROUP_ROOT) -> tuple[Hierarchy, ...]:
    """The hierarchies this worker may make job cgroups in: v2 where the host runs it, else
    v1's pids and memory controllers; empty when none is writable."""
    own = _own_paths()
    if (root / "cgroup.controllers").is_file():
        base = root / own.get("unified", "/").lstrip("/")
        if os.access(base, os.W_OK):
            return (Hierarchy("unified", base / PARENT, own.get("unified", "/")),)
        return ()
    found = []
    for controller in V1_CONTROLLERS:
        mount = root / controller
        base = mount / own.get(controller, "/").lstrip("/")
        if (mount / "cgroup.procs").is_file() and os.access(base, os.W_OK):
            found.append(Hierarchy(controller, base / PARENT, own.get(controller, "/")))
    return tuple(found)


def describe_support() -> str | None:
    """None when job cgroups with memory and process limits work here; else what is missing,
    for the worker's start-up warning."""
    hierarchies = detect_hierarchies()
    found = {h.controller for h in hierarchies}
    if not found:
        return (
            "no writable cgroup hierarchy (the worker is not root, or runs in an unprivileged "
            "container): jobs' memory and process limits are NOT enforced, and a job's "
            "processes are found by session, group and environment only"
        )
    if found != {"unified"} and found != set(V1_CONTROLLERS):
        return f"only the cgroup controllers {sorted(found)} are writable: limits partial"
    if found == {"unified"}:
        own = hierarchies[0].base.parent
        try:
            available = set((own / "cgroup.controllers").read_text().split())
        except OSError:
            available = set()
        missing = sorted(set(V1_CONTROLLERS) - available)
        if missing:
            return (
                f"cgroup v2: the controllers {missing} are not delegated to the worker's cgroup "
                f"({own}): jobs' processes are found by their cgroup, but their memory and "
                "process limits are NOT enforced"
            )
    return None


def cgroup_name(job_id: str, attempt: int, node: int | None = None) -> str:
    return f"{job_id}-{attempt}" + ("" if node is None else f"-node{node}")


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError as exc:
        log.warning("cannot write %s to %s: %s", value, path, exc)
        return False


class JobCgroup:
    """The cgroup of one attempt (one node of it), in every writable hierarchy."""

    def __init__(self, name: str, hierarchies: tuple[Hierarchy, ...]) -> None:
        self.name = name
        self.hierarchies = hierarchies
        self.dirs = [h.base / name for h in hierarchies]

    @classmethod
    def create(
        cls, name: str, *, memory_limit_bytes: int | None = None, pids_max: int | None = None
    ) -> "JobCgroup | None":
        """Make it (None where no hierarchy is writable) and set its limits."""
        hierarchies = detect_hierarchies()
        if not hierarchies:
            return None
        group = cls(name, hierarchies)
        for hierarchy, directory in zip(hierarchies, group.dirs, strict=True):
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                log.warning("cannot make the job cgroup %s: %s", directory, exc)
                return None
            if hierarchy.controller == "unified":
                for parent in (directory.parent.parent, directory.parent):
                    _write(parent / "cgroup.subtree_control", "+memory +pids")
        group.set_limits(memory_limit_bytes, pids_max)
        return group

    @classmethod
    def existing(cls, name: str) -> "JobCgroup | None":
        """The cgroup of that name if it is still there (after a worker died)."""
        group = cls(name, detect_hierarchies())
        return group if any(d.is_dir() for d in group.dirs) else None

    def set_limits(self, memory_limit_bytes: int | None, pids_max: int | None) -> None:
        for hierarchy, directory in zip(self.hierarchies, self.dirs, strict=True):
            if hierarchy.controller in ("memory", "unified") and memory_limit_bytes:
                unified = hierarchy.controller == "unified"
                name = "memory.max" if unified else "memory.limit_in_bytes"
                if (directory / name).exists():
                    _write(directory / name, str(memory_limit_bytes))
                    if (directory / "memory.swap.max").exists():
                        _write(directory / "memory.swap.max", "0")
            if hierarchy.controller in ("pids", "unified") and pids_max:
                if (directory / "pids.max").exists():
                    _write(directory / "pids.max", str(pids_max))

    @property
    def launcher_env(self) -> str:
        """``LAUNCHBAY_CGROUP``'s value (`jobs.contract.env.CGROUP`),
        ``<hierarchies>:/launchbay/<name>``: `lifeline.py` waits until that many lines of its
        /proc/self/cgroup end with that path."""
        return f"{len(self.dirs)}:/{PARENT}/{self.name}"

    def add(self, pid: int) -> None:
        for directory in self.dirs:
            _write(directory / "cgroup.procs", str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for directory in self.dirs:
            try:
                text = (directory / "cgroup.procs").read_text()
            except OSError:
                continue
            found.update(int(pid) for pid in text.split())
        return found

    def oom_killed(self) -> bool:
        """Whether the kernel's OOM killer killed a process of this cgroup (its memory limit)."""
        for hierarchy, directory in zip(self.hierarchies, self.dirs, strict=True):
            name = {"memory": "memory.oom_control", "unified": "memory.events"}.get(
                hierarchy.controller
            )
            if name is None:
                continue
            try:
                for line in (directory / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
            except (OSError, ValueError):
                continue
        return False

    def kill_all(self, timeout_s: float = 5.0) -> list[int]:
        """SIGKILL every process in the cgroup until none is left (a fork during the sweep is
        born inside and taken by the next round); returns the PIDs left after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        me = os.getpid()
        while True:
            left = self.pids() - {me}
            if not left:
                return []
            for directory in self.dirs:
                if (directory / "cgroup.kill").exists():
                    _write(directory / "cgroup.kill", "1")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if time.monotonic() >= deadline:
                log.error("cgroup %s: processes survive SIGKILL: %s", self.name, sorted(left))
                return sorted(left)
            time.sleep(0.05)

    def remove(self) -> None:
        """Remove the (empty) cgroup; a cgroup that still holds a process stays."""
        for directory in self.dirs:
            for _ in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)  # the last zombies are still being reaped
            else:
                log.warning("could not remove the job cgroup %s", directory)
