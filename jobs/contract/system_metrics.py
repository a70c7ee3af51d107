"""The names of a job's system metrics: what Launchbay measures of a job from outside it (each
GPU it holds: utilisation, memory used, power), stored as metric points beside the program's
own, under a prefix no program may write (`parse_event_line` refuses it).

    system/gpu0/utilization_percent     system/node1/gpu0/memory_used_bytes

`gpu<i>` is the GPU's place among the job's (the ranks' `cuda:<i>`); a node of a multi-node job
after the first names itself. A job's `latest_metrics` hold the program's metrics only.
"""

SYSTEM_PREFIX = "system/"
# What is measured of each GPU: name -> unit, as the metric's name ends.
GPU_UTILIZATION = "utilization_percent"
GPU_MEMORY_USED = "memory_used_bytes"
GPU_POWER = "power_watts"
GPU_QUANTITIES = (GPU_UTILIZATION, GPU_MEMORY_USED, GPU_POWER)


def is_system_metric(name: str) -> bool:
    """Whether `name` is one of Launchbay's own metrics (a program's may not start so)."""
    return name.startswith(SYSTEM_PREFIX)


def gpu_metric_name(index: int, quantity: str, node: int | None = None) -> str:
    """`system/gpu<index>/<quantity>`, `system/node<node>/gpu<index>/<quantity>` past node 0."""
    where = f"node{node}/" if node else ""
    return f"{SYSTEM_PREFIX}{where}gpu{index}/{quantity}"
