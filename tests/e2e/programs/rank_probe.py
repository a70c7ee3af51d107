"""Record what a rank sees of its process: the environment, torch's thread counts, its CPU
priority, scheduling policy, affinity, control groups and session group. Writes
``rank-<RANK>.json`` to ``$LAUNCHBAY_OUTPUT_DIR`` (else ``$RANK_PROBE_DIR``) after joining the
process group, so it runs as a real DDP rank does; it times nothing."""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def supervisor_threads() -> list[list[object]]:
    """[name, policy, nice] of each thread of the process that started the launcher (under
    Launchbay the supervisor: `LAUNCHBAY_LAUNCHER_PID`'s parent); [] bare."""
    launcher = os.environ.get("LAUNCHBAY_LAUNCHER_PID", "")
    if not launcher.isdigit():
        return []
    parent = read(f"/proc/{launcher}/stat").rpartition(")")[2].split()[1]
    found = []
    for tid in sorted(os.listdir(f"/proc/{parent}/task")):
        stat = read(f"/proc/{parent}/task/{tid}/stat")
        fields = stat.rpartition(")")[2].split()
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        found.append([name, int(fields[38]), int(fields[16]), tid == parent])
    return found


def main() -> None:
    dist.init_process_group("gloo")
    dist.barrier()
    seen = {
        "env": dict(os.environ),
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "policy": os.sched_getscheduler(0),
        "affinity": sorted(os.sched_getaffinity(0)),
        "cgroup": read("/proc/self/cgroup"),
        "autogroup_nice": read("/proc/self/autogroup").split()[-1:],
        "unbuffered": sys.stdout.write_through,
        "supervisor_threads": supervisor_threads(),
    }
    # Under Launchbay the job's own output directory (its artifacts); bare, where it is told.
    out = Path(os.environ.get("LAUNCHBAY_OUTPUT_DIR") or os.environ["RANK_PROBE_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank-{os.environ['RANK']}.json").write_text(json.dumps(seen))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
