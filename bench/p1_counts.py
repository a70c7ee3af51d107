"""What a job's ranks lose to the rest of the host, counted rather than timed (Linux `/proc`).

For every thread of the processes watched: CPU time, time spent waiting in a run queue and
time slices (`/proc/<pid>/task/<tid>/schedstat`, nanoseconds), voluntary and involuntary
context switches (`status`), and its scheduling policy and nice value (`stat`). Two snapshots
around a window of steady training give, per second of the window, what the ranks waited and
how often they were pre-empted, and what CPU the service's own threads took and how often they
woke up. Counts move far less with a loaded machine than steps/s does.
"""

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from devstack.stack import Stack

POLICIES = {0: "other", 1: "fifo", 2: "rr", 3: "batch", 5: "idle", 6: "deadline"}


@dataclass(frozen=True)
class ThreadCounts:
    pid: int
    tid: int
    comm: str
    cpu_ns: int
    wait_ns: int
    slices: int
    voluntary: int
    involuntary: int
    policy: str
    nice: int


def _thread(pid: int, tid: int) -> ThreadCounts | None:
    base = Path(f"/proc/{pid}/task/{tid}")
    try:
        cpu, wait, slices = (int(x) for x in (base / "schedstat").read_text().split()[:3])
        status = (base / "status").read_text()
        stat = (base / "stat").read_text()
    except (OSError, ValueError):
        return None
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    # Fields after the comm: state is field 3 of stat(5), so field n is fields[n - 3].
    nice, policy = int(fields[19 - 3]), int(fields[41 - 3])
    switches = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            switches[key] = int(value)
    return ThreadCounts(
        pid,
        tid,
        comm,
        cpu,
        wait,
        slices,
        switches.get("voluntary_ctxt_switches", 0),
        switches.get("nonvoluntary_ctxt_switches", 0),
        POLICIES.get(policy, str(policy)),
        nice,
    )


def snapshot(pids: Iterable[int]) -> dict[int, ThreadCounts]:
    """Every thread of `pids` now, by thread id."""
    found: dict[int, ThreadCounts] = {}
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            counts = _thread(pid, tid)
            if counts is not None:
                found[tid] = counts
    return found


@dataclass
class Totals:
    """Sums over the threads alive at both snapshots."""

    cpu_s: float = 0.0
    wait_s: float = 0.0
    voluntary: int = 0
    involuntary: int = 0
    threads: int = 0

    def per(self, seconds: float) -> "Totals":
        return Totals(
            self.cpu_s / seconds,
            self.wait_s / seconds,
            round(self.voluntary / seconds),
            round(self.involuntary / seconds),
            self.threads,
        )


def difference(before: dict[int, ThreadCounts], after: dict[int, ThreadCounts]) -> Totals:
    totals = Totals()
    for tid, end in after.items():
        start = before.get(tid)
        if start is None or start.pid != end.pid:
            continue
        totals.cpu_s += (end.cpu_ns - start.cpu_ns) / 1e9
        totals.wait_s += (end.wait_ns - start.wait_ns) / 1e9
        totals.voluntary += end.voluntary - start.voluntary
        totals.involuntary += end.involuntary - start.involuntary
        totals.threads += 1
    return totals


def per_thread(
    before: dict[int, ThreadCounts], after: dict[int, ThreadCounts], seconds: float
) -> list[str]:
    """One line per thread that ran in the window: comm, policy/nice, CPU ms/s, wakeups/s."""
    lines = []
    for tid, end in sorted(after.items()):
        start = before.get(tid)
        if start is None or end.cpu_ns == start.cpu_ns:
            continue
        lines.append(
            f"{end.pid}/{tid} {end.comm} [{end.policy} nice {end.nice}]: "
            f"cpu {(end.cpu_ns - start.cpu_ns) / 1e6 / seconds:.1f} ms/s, "
            f"runq wait {(end.wait_ns - start.wait_ns) / 1e6 / seconds:.1f} ms/s, "
            f"switches {(end.voluntary - start.voluntary) / seconds:.1f} vol/s "
            f"{(end.involuntary - start.involuntary) / seconds:.1f} invol/s"
        )
    return lines


def process_tree(root: int, leave_out: Iterable[int] = ()) -> list[int]:
    """`root` and its descendants, without the subtrees of `leave_out`."""
    skip = set(leave_out)
    try:
        proc = psutil.Process(root)
        found = [root]
        for child in proc.children():
            if child.pid not in skip:
                found += process_tree(child.pid, skip)
        return found
    except psutil.Error:
        return []


def service_pids(stack: "Stack") -> list[int]:
    """Launchbay's own processes: the API, each worker and its supervisor of a job (not the
    job's torchrun agent and ranks)."""
    pids = [stack.api.pid] if stack.api is not None else []
    for worker in stack.workers:
        agents = [
            p.pid
            for p in psutil.Process(worker.pid).children(recursive=True)
            if "torch.distributed.run" in " ".join(p.cmdline())
        ]
        pids += process_tree(worker.pid, agents)
    return pids


class TrainingWindow:
    """Counts the threads of some processes over a window of steady training, from a thread of
    the benchmark: it waits for the first metric line in the events file `find_events()`
    returns, `settle_s` more, then snapshots `find_pids()` twice, `window_s` apart (only
    stat() and /proc reads: nothing that competes with the ranks in between)."""

    def __init__(
        self,
        find_events: Callable[[], Path | None],
        find_pids: Callable[[], list[int]],
        *,
        window_s: float = 8.0,
        settle_s: float = 2.0,
        timeout_s: float = 120.0,
    ) -> None:
        self.find_events, self.find_pids = find_events, find_pids
        self.window_s, self.settle_s, self.timeout_s = window_s, settle_s, timeout_s
        self.totals: Totals | None = None
        self._thread = threading.Thread(target=self._run, name="bench-window", daemon=True)

    def __enter__(self) -> "TrainingWindow":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(self.timeout_s)

    def _run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            events = self.find_events()
            if events is not None and has_metric(events):
                break
            time.sleep(0.5)
        else:
            return
        time.sleep(self.settle_s)
        pids = self.find_pids()
        before, began = snapshot(pids), time.monotonic()
        time.sleep(self.window_s)
        after = snapshot(pids)
        self.totals = difference(before, after).per(time.monotonic() - began)


def has_metric(events: Path) -> bool:
    """Rank 0 has written a metric line (its first 64 KiB read)."""
    try:
        with events.open("rb") as handle:
            return b'"metric"' in handle.read(1 << 16)
    except OSError:
        return False
