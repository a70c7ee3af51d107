"""Numbers a framework logs, as the events file's metric lines: no framework imported here, so
every integration (and capture, `jobs.integrations.attach`) shares it."""

import math
from typing import Any

from jobs.contract.events import metric_line
from jobs.contract.system_metrics import is_system_metric
from jobs.runtime.events import clean_metrics, write_event


def split_epoch(values: dict[str, Any]) -> tuple[int | None, dict[str, Any]]:
    """(the epoch as the protocol's whole number, the other values). Frameworks log the
    epoch as a float (2.5: half-way through the third); the line keeps its whole part and
    the exact value as the metric `epoch`."""
    rest = dict(values)
    epoch = rest.get("epoch")
    if isinstance(epoch, int | float) and not isinstance(epoch, bool) and math.isfinite(epoch):
        return int(math.floor(epoch)), rest
    rest.pop("epoch", None)
    return None, rest


def report_values(step: int, values: dict[str, Any], total_steps: int | None = None) -> bool:
    """One metric line of `values` at `step` (its numbers; `epoch` as `split_epoch` says):
    the names are free here (`epoch`, `eval/loss`), unlike keyword arguments of `lb.report`,
    except Launchbay's own `system/...`, left out (the line would be refused whole).
    `total_steps`: the framework's planned steps, when it knows them (the job's ETA)."""
    epoch, rest = split_epoch(values)
    metrics = clean_metrics({k: v for k, v in rest.items() if not is_system_metric(str(k))})
    if not metrics:
        return False
    return write_event(metric_line(step, epoch, metrics, total_steps=total_steps))


def planned_steps(steps: Any) -> int | None:
    """A framework's planned steps as the line's `total_steps` (Trainer's `state.max_steps`,
    known once training starts, 0 or -1 before): a positive integer, else None."""
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
