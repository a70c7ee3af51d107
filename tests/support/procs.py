"""Moved to `devstack.procs`, which the benchmarks share; the tests keep importing it here."""

from devstack.procs import (
    SESSION_MARKER,
    free_port,
    job_processes,
    marked_processes,
    start,
    stop,
    wait_until,
)

__all__ = [
    "SESSION_MARKER",
    "free_port",
    "wait_until",
    "start",
    "stop",
    "marked_processes",
    "job_processes",
]
