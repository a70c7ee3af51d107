"""What went wrong in an attempt without failing it, said in the job's `warnings`:

- ranks that never trained as one process group while ``WORLD_SIZE`` > 1 (each trained a copy
  of its own): no group, a group of another size, or one on which no collective ran, read from
  the records the ranks leave (`rank_group.py`, ``rank-<n>.group``);
- a job that ran to its end having recorded nothing at all: no step, metric or checkpoint
  reported, no output file written (a script that found no GPU and exited 0, an ``mp.spawn``
  of 0 processes);
- a `best_metric` that no checkpoint reported (retention then deletes nothing for not being
  the best: `worker.checkpoints.select_retained`).

A record is a file the rank's own process writes, so the program could write one too: a
record counts only from the attempt's log directory, of its last elastic restart, from a
process that wrote no other rank's record, and says which rank of which group its rank was; a
log line never counts.
A program that lies about every one of its ranks is not caught (see docs/training-scripts.md).
"""

import difflib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.contract import rank_files
from jobs.contract.checkpoints import CheckpointPolicy
from jobs.spec import JobSpec
from service.db import session_scope
from service.records import list_checkpoints, metric_names
from worker.checkpoints import CheckpointRegistrar
from worker.ingest import Ingestor
from worker.launch import LaunchPlan, RunPaths
from worker.outcome import read_tail

# One warning is at most this long (what a job controls in it is cut first).
# Said of a job that succeeded with no metric and no checkpoint (a program that prints its
# metrics and saves to a path of its own): the user sees why the dashboard is empty.
NOTHING_REPORTED = (
    "the job reported no metric and no checkpoint: report them with the SDK (jobs.runtime) "
    "or the events file (LAUNCHBAY_EVENTS_FILE); files written to LAUNCHBAY_OUTPUT_DIR are "
    "kept as the job's artifacts (docs/training-scripts.md)"
)
MAX_WARNING_CHARS = 500
MAX_QUOTED_CHARS = 160
MAX_NAMES_LISTED = 5
# Lines of a rank's log that Launchbay wrote, not the program.
OWN_LINE_PREFIXES = ("[launchbay]", "[environment]")
HELP = "docs/training-scripts.md#one-process-group"


@dataclass(frozen=True)
class GroupRecord:
    pid: int
    rank: int
    world_size: int
    restart: int
    # Collectives run on the rank's groups: none means each rank trained on its own.
    collectives: int

    def describe(self) -> str:
        said = f"rank {self.rank} of a group of {self.world_size}"
        return said if self.collectives else f"{said} that ran no collective"


def quote(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """Text of the job's, quoted and cut to `limit` characters."""
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def clip(warning: str) -> str:
    if len(warning) <= MAX_WARNING_CHARS:
        return warning
    return warning[: MAX_WARNING_CHARS - 3] + "..."


def rank_logs(log_dir: Path) -> list[int]:
    """The ranks that ran in this attempt on this node (each has its log file)."""
    try:
        return sorted(rank_files.LOG.ranks_in(os.listdir(log_dir)))
    except OSError:
        return []


def read_group_records(log_dir: Path, restart: int) -> dict[int, GroupRecord]:
    """{rank its file names: record} of the given elastic restart; unreadable ones left out."""
    records: dict[int, GroupRecord] = {}
    try:
        names = os.listdir(log_dir)
    except OSError:
        return records
    for name in names:
        file_rank = rank_files.GROUP.rank_of(name)
        if file_rank is None:
            continue
        try:
            fd = os.open(log_dir / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with open(fd, "rb") as handle:
                data = json.loads(handle.read(4096))
            record = GroupRecord(
                int(data["pid"]),
                int(data["rank"]),
                int(data["world_size"]),
                int(data["restart"]),
                int(data.get("collectives", 0)),
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if record.restart == restart:
            records[file_rank] = record
    return records


def _honest(records: dict[int, GroupRecord]) -> dict[int, GroupRecord]:
    """The records that can be taken at their word: from a process that wrote no other
    rank's record."""
    pids = [r.pid for r in records.values()]
    return {rank: r for rank, r in records.items() if pids.count(r.pid) == 1}


def group_warning(log_dir: Path, *, launcher: str, world_size: int, restart: int = 0) -> str | None:
    """Why the ranks did not form one process group of `world_size`, or None when they did
    (or when `world_size` is 1). Under the `python` launcher the program starts its own
    processes: one group of more than one process among them is enough."""
    if world_size <= 1:
        return None
    records = _honest(read_group_records(log_dir, restart))
    if launcher == "python":
        if any(r.world_size > 1 and r.collectives for r in records.values()):
            return None
        return (
            f"WORLD_SIZE={world_size}, but no process of the job ran in a process group of "
            "more than one: whatever it started ran on its own, not as one distributed job "
            f"({HELP})"
        )
    seen = []
    for rank in rank_logs(log_dir):
        record = records.get(rank)
        if record is None:
            seen.append(f"rank {rank}: no process group")
        elif (record.rank, record.world_size) != (rank, world_size) or not record.collectives:
            seen.append(f"rank {rank}: {record.describe()}")
    if not seen:
        return None
    listed = "; ".join(seen[:8]) + ("; ..." if len(seen) > 8 else "")
    return (
        f"the ranks never trained as one process group of WORLD_SIZE={world_size} ({listed}): "
        f"each trained on its own, not as one distributed job ({HELP})"
    )


def has_output(output_dir: Path) -> bool:
    """Whether the job wrote any file to its output directory."""
    for _, _, files in os.walk(output_dir):
        if files:
            return True
    return False


def nothing_warning(last_line: str | None) -> str:
    said = f"; the last line rank 0 printed: {quote(last_line)}" if last_line else ""
    return clip(
        "the job ran to its end but recorded nothing: no step, metric or checkpoint reported, "
        f"no output file written{said}"
    )


def nearest(name: str, names: Iterable[str]) -> str | None:
    """The reported name closest to `name` (one that starts like it first: `acc` → `accuracy`)."""
    candidates = sorted(set(names))
    if not candidates:
        return None

    def closeness(other: str) -> tuple[bool, float]:
        prefix = other.lower().startswith(name.lower()) or name.lower().startswith(other.lower())
        return prefix, difflib.SequenceMatcher(None, name.lower(), other.lower()).ratio()

    return max(candidates, key=closeness)


def best_metric_warning(
    policy: CheckpointPolicy,
    checkpoint_metrics: Sequence[Mapping[str, object] | None],
    reported: Iterable[str] = (),
) -> str | None:
    """The warning for a `best_metric` that none of the job's checkpoints reported, with the
    nearest name reported (by a checkpoint or as a metric); None when one did, or when the
    job had no checkpoint (or names no best metric)."""
    name = policy.best_metric
    if not name or not checkpoint_metrics:
        return None
    found = [dict(m or {}) for m in checkpoint_metrics]
    if policy.best(found, metrics=lambda m: m, seq=lambda m: 0) is not None:
        return None
    names = {n for m in found for n in m} | set(reported)
    close = nearest(name, names)
    listed = ", ".join(quote(n, 40) for n in sorted(names)[:MAX_NAMES_LISTED])
    more = f" and {len(names) - MAX_NAMES_LISTED} more" if len(names) > MAX_NAMES_LISTED else ""
    hint = f"; the nearest reported name is {quote(close, 40)}" if close else ""
    return clip(
        f"best_metric {quote(name, 40)} was never reported by a checkpoint "
        f"(reported: {listed or 'no metric'}{more}){hint}: no checkpoint was deleted for not "
        "being the best"
    )


@dataclass(frozen=True)
class AttemptFacts:
    """What the supervisor saw of an attempt, for its warnings."""

    succeeded: bool
    launcher: str
    world_size: int
    restart: int
    # Whether this node runs rank 0 of a single-node job (whose events and outputs it sees).
    sees_everything: bool
    # Events-file lines read, metric points, checkpoints registered or refused.
    reported: int

    @classmethod
    def of(
        cls, spec: JobSpec, plan: LaunchPlan, restart: int, succeeded: bool, reported: int
    ) -> "AttemptFacts":
        nodes = spec.nnodes if plan.launcher == "torchrun" else 1
        return cls(
            succeeded=succeeded,
            launcher=plan.launcher,
            world_size=spec.nproc_per_node * nodes,
            restart=restart,
            sees_everything=spec.nnodes == 1,
            reported=reported,
        )


# Said of a job that succeeded with no metric and no checkpoint (a program that prints its
# metrics and saves to a path of its own): the user sees why the dashboard is empty.
NOTHING_REPORTED = (
    "the job reported no metric and no checkpoint: report them with the SDK (jobs.runtime) "
    "or the events file (LAUNCHBAY_EVENTS_FILE); files written to LAUNCHBAY_OUTPUT_DIR are "
    "kept as the job's artifacts (docs/training-scripts.md)"
)


def reported_nothing(ingestor: Ingestor, registrar: CheckpointRegistrar) -> bool:
    """No metric point, no checkpoint (registered or refused), no invalid events line."""
    return (
        ingestor.metric_points_seen == 0
        and registrar.registered == 0
        and registrar.rejected == 0
        and ingestor.invalid_events == 0
    )


def attempt_notes(
    ingestor: Ingestor,
    registrar: CheckpointRegistrar,
    survivors: Sequence[int],
    succeeded: bool,
    single_node: bool,
    output_dir: Path,
) -> str | None:
    """What ingestion skipped, for the job's final message; for a job that succeeded without
    reporting anything, that it did not."""
    parts = []
    if ingestor.invalid_events:
        reasons = "; ".join(ingestor.invalid_reasons)
        parts.append(f"{ingestor.invalid_events} invalid events-file line(s) skipped ({reasons})")
    if registrar.rejected:
        parts.append(f"{registrar.rejected} reported checkpoint(s) not registered")
    if survivors:
        parts.append(f"processes {list(survivors)} survived SIGKILL")
    # Said by a warning instead when the job wrote no output file either.
    if succeeded and single_node and reported_nothing(ingestor, registrar):
        if reported_count(ingestor, registrar) or has_output(output_dir):
            parts.append(NOTHING_REPORTED)
    return "; ".join(parts) if parts else None


def reported_count(ingestor: Ingestor, registrar: CheckpointRegistrar) -> int:
    """Events-file lines, metric points and checkpoints (registered or not) seen."""
    return (
        ingestor.events_lines
        + ingestor.metric_points_seen
        + registrar.registered
        + registrar.rejected
    )


def last_printed_line(log_file: Path) -> str | None:
    """The last line the program printed to `log_file` (Launchbay's own lines left out)."""
    for line in reversed(read_tail(log_file, 64 * 1024).splitlines()):
        if line.strip() and not line.startswith(OWN_LINE_PREFIXES):
            return line
    return None


def collect_warnings(
    engine: Engine, job_id: str, policy: CheckpointPolicy, paths: RunPaths, facts: AttemptFacts
) -> list[str]:
    """Every warning of the attempt (see the module docstring), in a fixed order."""
    found: list[str | None] = []
    if facts.succeeded:
        found.append(
            group_warning(
                paths.log_dir,
                launcher=facts.launcher,
                world_size=facts.world_size,
                restart=facts.restart,
            )
        )
        if facts.sees_everything and not facts.reported and not has_output(paths.output_dir):
            found.append(nothing_warning(last_printed_line(paths.rank_log(0))))
    if policy.best_metric:
        try:
            with session_scope(engine) as session:
                metrics = [c.metrics for c in list_checkpoints(session, job_id)]
                names = metric_names(session, job_id)
            found.append(best_metric_warning(policy, metrics, names))
        except SQLAlchemyError:
            pass  # a warning is not worth failing the attempt's end for
    return [clip(w) for w in found if w]
