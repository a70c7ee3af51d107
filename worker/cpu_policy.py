"""How the supervisor's threads share the CPU with the ranks they watch."""

import os
import sys


def _set_policy(tid: int, policy: int) -> bool:
    try:
        os.sched_setscheduler(tid, policy, os.sched_param(0))
        return True
    except (OSError, AttributeError):  # not Linux, or the thread is gone
        return False


def run_in_batches(tid: int = 0) -> bool:
    """Put thread `tid` (0: the calling one) in ``SCHED_BATCH``: it never pre-empts a running
    rank when it wakes, yet keeps its full share of the CPU, so ranks that use every core
    cannot starve it. Threads it starts from then on inherit the policy. False where it cannot
    be set (not Linux).

    Why not nice alone: Linux schedules each session as one group (autogroup) and torchrun
    starts every rank in a session of its own, so a nice value weighs only against the
    worker's own threads, and a niced thread that wakes still pre-empts a running rank: a rank
    held off its core for a moment holds back every rank of a DDP step (docs/benchmarks.md,
    P1). Why not ``SCHED_IDLE``: it runs only on a core nobody wants, and ranks that spin on
    every core (CPU training, CUDA's spin-wait, data loaders) would starve the supervisor, so
    its ingestion, cancel checks and heartbeat would fall behind without bound; measured here,
    it took no less from the ranks than this."""
    return _set_policy(tid, getattr(os, "SCHED_BATCH", -1))


def yield_cpu_to_ranks() -> list[int]:
    """Once the ranks run: every thread of this process runs in batches (`run_in_batches`),
    and so do the threads it starts later (the checkpoint upload's, its store client's).
    Returns the threads changed. `back_to_normal` undoes it."""
    return [tid for tid in _threads() if run_in_batches(tid)]


def back_to_normal() -> list[int]:
    """Once the attempt is over: every thread of this process back to the normal policy, so
    that the next job's launcher (which inherits it) starts as it would in a fresh process.
    Returns the threads changed."""
    return [tid for tid in _threads() if _set_policy(tid, getattr(os, "SCHED_OTHER", -1))]


def _threads() -> list[int]:
    if not sys.platform.startswith("linux"):
        return []
    return [int(name) for name in os.listdir(f"/proc/{os.getpid()}/task")]
