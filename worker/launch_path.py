"""Which path an attempt's ranks start by: `warm` (forked from the worker's fork server,
`worker.warm_start`) or `cold` (torchrun, `worker.process_tree.start_launcher`), and why cold.

Warm is the default for a single-node job whose spec does not name its launcher
(docs/training-scripts.md, "Warm starts"). Cold, with the reason said, when:

- the spec names `launcher: torchrun` (the way to opt out) or `launcher: python` (a program
  that starts its own processes);
- the job has several nodes (torchrun's c10d rendezvous meets them);
- the worker has warm starts off (`LAUNCHBAY_WARM_START=false`), or its supervisor keeps no
  fork server (a Slurm allocation's node);
- the job's `env` sets a variable torch reads as it is imported (the fork server imported it
  already, with the worker's values);
- the environment's Python has no torch, or its fork server cannot be had;
- the program's directory holds a module of the name of one the fork server imported (a cold
  program would import its own).
"""

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from jobs.spec import JobSpec
from worker.warm_pool import read_at_import

WARM = "warm"
COLD = "cold"


@dataclass(frozen=True)
class LaunchChoice:
    path: str
    reason: str | None = None  # why cold

    @property
    def warm(self) -> bool:
        return self.path == WARM


NOT_WARM = LaunchChoice(COLD, "not asked to start warm")


def choose_launch_path(
    spec: JobSpec, *, launcher_given: bool, enabled: bool, has_pool: bool
) -> LaunchChoice:
    """The path the spec and the worker allow, before the fork server is asked for."""
    if spec.launcher == "python":
        return LaunchChoice(COLD, "launcher: python starts one process that may start its own")
    if launcher_given:
        return LaunchChoice(COLD, "the spec names launcher: torchrun")
    if spec.nnodes > 1:
        return LaunchChoice(COLD, "a multi-node job meets at torchrun's c10d rendezvous")
    if not enabled:
        return LaunchChoice(COLD, "warm starts are off on this worker (LAUNCHBAY_WARM_START)")
    if not has_pool:
        return LaunchChoice(COLD, "this supervisor keeps no fork server")
    fixed = sorted(name for name in spec.env if read_at_import(name))
    if fixed:
        return LaunchChoice(
            COLD, f"the job's env sets {', '.join(fixed)}, read when torch is imported"
        )
    return LaunchChoice(WARM)


def shadowed(directory: Path, modules: Iterable[str]) -> list[str]:
    """The names of `modules` that a module or package in `directory` (first on the program's
    `sys.path`) would shadow."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    own = {entry.partition(".")[0] for entry in entries}
    return sorted(own & set(modules))
