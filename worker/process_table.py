"""The machine's process table, as the supervisor scans it: each live process's PID, parent,
start time (psutil's) and name, read from ``/proc/<pid>/stat`` once each on Linux."""

import os
import sys
from dataclasses import dataclass
from functools import cache

import psutil


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    create_time: float
    name: str


def live_processes() -> dict[int, Proc]:
    """Every process on the machine that is not a zombie, by PID."""
    if sys.platform == "linux":
        return _proc_stats()
    found: dict[int, Proc] = {}
    for proc in psutil.process_iter(["pid", "ppid", "create_time", "status", "name"]):
        info = proc.info
        if info["status"] == psutil.STATUS_ZOMBIE or info["create_time"] is None:
            continue
        found[info["pid"]] = Proc(info["pid"], info["ppid"] or 0, info["create_time"], info["name"])
    return found


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@cache
def _boot_time() -> float:
    return float(psutil.boot_time())  # read once, as psutil's own start times do


def _proc_stats() -> dict[int, Proc]:
    """`live_processes` from one read of ``/proc/<pid>/stat`` each: a third of what psutil
    reads for the same fields (a scan runs every few polls of every attempt)."""
    found: dict[int, Proc] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            proc = proc_stat(int(entry.name))
            if proc is not None:
                found[proc.pid] = proc
    return found


def proc_stat(pid: int, *, zombie: bool = False) -> Proc | None:
    """The process from its ``/proc/<pid>/stat``; None when it is gone, or a zombie unless
    `zombie` says one will do. Its start time is psutil's, from the same clock ticks and boot
    time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:  # gone, or hidden from us
        return None
    name_start, name_end = data.find(b"("), data.rfind(b")")
    fields = data[name_end + 2 :].split()
    if name_start < 0 or len(fields) < 20 or (fields[0] == b"Z" and not zombie):
        return None
    create_time = int(fields[19]) / _CLOCK_TICKS + _boot_time()
    name = data[name_start + 1 : name_end].decode(errors="replace")
    return Proc(pid, int(fields[1]), create_time, name)
