"""The goodput ledger: where a job's wall time and device time went (docs/goodput.md). The
parts and their rules are written here once; the service builds the records from what it
stores (`service.records.goodput`) and answers with `job_ledger`'s result.

An attempt's wall time is a chain of moments, each kept between the one before and the end:

    queued_at ── started_at ── running_at ── first step ── end of training ── processes ended ── end
     queued or     environment    first_step    training,        hang (a           teardown
     retry_gap     + launch                     checkpoint_stall, hang stop)
                                                eval, lost_work

- `queued`: the first attempt's wait from submission to a worker taking it (`detail`: the
  pending reason the scheduler stored last); `retry_gap`: a later attempt's wait in the queue
  after the one before ended.
- `environment`: the job's environment build (the worker's `environment` event), within the
  attempt's start; `launch`: the rest of the start, up to the ranks being up (torchrun's start,
  the rendezvous).
- `first_step`: from the ranks being up to the first metric line (the end of the first step).
- `training`: from there to the last progress (the last line rank 0 wrote), less
  `checkpoint_stall` (the `checkpoint_save` marks), `eval` (the `eval` marks) and, for an
  attempt that was retried, `lost_work`: what it trained after its last registered
  checkpoint, which the retry does again (all of its training when it registered none).
- `hang`: for an attempt the hang watchdog stopped, from the progress the watchdog last saw
  (or, with none, the start of its watch) to its stop; what came before is launch, first step
  and training as usual, however far the worker had seen the attempt get.
- `teardown`: from the end of training (or the hang stop) to the end of the attempt: the
  program's exit, stopping the processes, recording the outcome.

A program that reported no progress at all trains from the ranks being up to its end.

Every part is a whole number of ticks (1/1024 s), so the parts' seconds add up exactly to
`wall_s` in floating point, in any order. Devices are held from the start of an attempt to its
end: every part but `queued` and `retry_gap` has `device_seconds` = devices × `seconds`.
`goodput` = training's device-seconds ÷ `device_s` (0 when nothing was held).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

QUEUED = "queued"
ENVIRONMENT = "environment"
LAUNCH = "launch"
FIRST_STEP = "first_step"
TRAINING = "training"
CHECKPOINT_STALL = "checkpoint_stall"
EVAL = "eval"
HANG = "hang"
LOST_WORK = "lost_work"
RETRY_GAP = "retry_gap"
TEARDOWN = "teardown"

# In the order they are answered.
PARTS = (
    QUEUED,
    ENVIRONMENT,
    LAUNCH,
    FIRST_STEP,
    TRAINING,
    CHECKPOINT_STALL,
    EVAL,
    HANG,
    LOST_WORK,
    RETRY_GAP,
    TEARDOWN,
)
# Parts during which no device is held.
WAITING = frozenset({QUEUED, RETRY_GAP})
BADPUT = tuple(p for p in PARTS if p != TRAINING)

TICKS_PER_S = 1024
# The longest a part may be: a clock or a mark past this is nonsense (about 300 years).
MAX_TICKS = 10**10 * TICKS_PER_S


def ticks(seconds: float) -> int:
    """Seconds as whole ticks; what is not a finite number is 0."""
    if not isinstance(seconds, int | float) or not math.isfinite(seconds):
        return 0
    return max(-MAX_TICKS, min(MAX_TICKS, round(seconds * TICKS_PER_S)))


def seconds_of(count: int) -> float:
    return count / TICKS_PER_S


@dataclass(frozen=True)
class AttemptMarks:
    """What the worker gathered of an attempt while it ran (Unix seconds; the totals in
    seconds), already clipped to the attempt by the worker: the ledger clips again."""

    first_step_at: float | None = None
    last_progress_at: float | None = None
    checkpoint_stall_s: float = 0.0
    checkpoint_saves: int = 0
    eval_s: float = 0.0
    evals: int = 0
    # When the save of the last checkpoint registered in this attempt ended.
    last_checkpoint_at: float | None = None
    # When the processes ended, or the worker decided to stop them.
    ended_at: float | None = None
    # For a hang stop: the progress the watchdog last saw (or the attempt's start).
    hang_since: float | None = None


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt as the service stored it (Unix seconds)."""

    attempt: int
    queued_at: float
    started_at: float | None = None
    running_at: float | None = None
    # The attempt's end: its terminal state, or the job queued again as the next attempt;
    # None while it is the job's current attempt and the job has not ended.
    end_at: float | None = None
    retried: bool = False
    exit_reason: str | None = None
    pending_reason: str | None = None
    environment_s: float = 0.0
    environment_end_at: float | None = None
    environment_cached: bool | None = None
    marks: AttemptMarks = field(default_factory=AttemptMarks)


@dataclass(frozen=True)
class Part:
    name: str
    seconds: float
    device_seconds: float
    detail: str | None = None


@dataclass(frozen=True)
class Ledger:
    wall_s: float
    device_s: float
    goodput: float
    parts: tuple[Part, ...]
    attempts: tuple["AttemptLedger", ...] = ()

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)


@dataclass(frozen=True)
class AttemptLedger:
    attempt: int
    ledger: Ledger


def _clamp(value: float | None, low: int, high: int, default: int) -> int:
    if value is None:
        return default
    return max(low, min(high, ticks(value)))


def attempt_ticks(record: AttemptRecord, now: float, first: bool) -> dict[str, int]:
    """The attempt's parts in ticks: never negative, adding up to its wall time."""
    parts = dict.fromkeys(PARTS, 0)
    queued_at = ticks(record.queued_at)
    end = max(queued_at, ticks(record.end_at if record.end_at is not None else now))
    started = _clamp(record.started_at, queued_at, end, end)
    parts[QUEUED if first else RETRY_GAP] = started - queued_at
    marks = record.marks
    stopped = _clamp(marks.ended_at, started, end, end)
    # A hang stop: from what the watchdog last saw to its stop, whatever the worker knew then.
    hang_from = None
    if marks.hang_since is not None:
        hang_from = _clamp(marks.hang_since, started, stopped, stopped)
    cap = stopped if hang_from is None else hang_from
    running = _clamp(record.running_at, started, cap, cap)
    env_end = _clamp(record.environment_end_at, started, running, started)
    env_start = max(started, env_end - max(0, ticks(record.environment_s)))
    parts[ENVIRONMENT] = env_end - env_start
    parts[LAUNCH] = running - started - parts[ENVIRONMENT]
    progressed = marks.first_step_at is not None or marks.last_progress_at is not None
    # Still running: it trains up to now, whatever it last wrote.
    live = record.end_at is None and marks.ended_at is None
    first_step = _clamp(marks.first_step_at, running, cap, running) if progressed else running
    if not progressed or live:
        trained_until = cap
    else:
        trained_until = _clamp(marks.last_progress_at, first_step, cap, first_step)
    parts[FIRST_STEP] = first_step - running
    parts[HANG] = stopped - hang_from if hang_from is not None else 0
    parts[TEARDOWN] = end - trained_until - parts[HANG]
    span = trained_until - first_step
    stall = min(span, max(0, ticks(marks.checkpoint_stall_s)))
    evaluating = min(span - stall, max(0, ticks(marks.eval_s)))
    productive = span - stall - evaluating
    if record.retried:
        kept = _clamp(marks.last_checkpoint_at, first_step, trained_until, first_step)
        parts[LOST_WORK] = min(productive, trained_until - kept)
    parts[CHECKPOINT_STALL], parts[EVAL] = stall, evaluating
    parts[TRAINING] = productive - parts[LOST_WORK]
    return parts


def _details(
    records: Sequence[AttemptRecord], counted: dict[str, int], first: bool
) -> dict[str, str]:
    """What each part was made of, for a person (`first`: records[0] is the job's first)."""
    details: dict[str, str] = {}
    if first and records:
        details[QUEUED] = records[0].pending_reason or "waiting for a worker to take it"
    again = records[1:] if first else records
    if again:
        waits = "; ".join(f"attempt {r.attempt}: {r.pending_reason or 'queued'}" for r in again)
        details[RETRY_GAP] = f"queued again after an attempt ended ({waits})"
    built = [r for r in records if r.environment_end_at is not None]
    if built:
        cached = sum(1 for r in built if r.environment_cached)
        details[ENVIRONMENT] = f"{len(built)} environment(s), {cached} of them cached"
    details[LAUNCH] = "torchrun's start and the rendezvous, to the ranks being up"
    details[FIRST_STEP] = "from the ranks being up to the first metric line"
    saves = sum(r.marks.checkpoint_saves for r in records)
    details[CHECKPOINT_STALL] = f"{saves} checkpoint save(s) marked"
    details[EVAL] = f"{sum(r.marks.evals for r in records)} evaluation(s) marked"
    hung = [str(r.attempt) for r in records if r.marks.hang_since is not None]
    if hung:
        details[HANG] = f"no progress until the hang watchdog stopped attempt(s) {', '.join(hung)}"
    retried = [r for r in records if r.retried]
    if retried:
        ended = ", ".join(f"{r.attempt} ({r.exit_reason or 'ended'})" for r in retried)
        details[LOST_WORK] = f"training after the last checkpoint of attempt(s) {ended}"
    details[TEARDOWN] = "from the last progress to the attempt's recorded end"
    return {name: text for name, text in details.items() if counted.get(name, 0)}


def _ledger(counted: dict[str, int], devices: int, details: dict[str, str]) -> Ledger:
    parts = tuple(
        Part(
            name,
            seconds_of(counted[name]),
            0.0 if name in WAITING else seconds_of(counted[name] * devices),
            details.get(name),
        )
        for name in PARTS
    )
    held = sum(counted[name] for name in PARTS if name not in WAITING) * devices
    trained = counted[TRAINING] * devices
    return Ledger(
        wall_s=seconds_of(sum(counted.values())),
        device_s=seconds_of(held),
        goodput=round(trained / held, 6) if held else 0.0,
        parts=parts,
    )


def job_ledger(records: Sequence[AttemptRecord], devices: int, now: float) -> Ledger:
    """The job's ledger (its attempts' summed), with each attempt's own in `attempts`.
    `records` in attempt order, each attempt's `queued_at` the end of the one before."""
    devices = max(0, devices)
    total = dict.fromkeys(PARTS, 0)
    per_attempt = []
    for index, record in enumerate(records):
        counted = attempt_ticks(record, now, first=index == 0)
        for name, count in counted.items():
            total[name] += count
        ledger = _ledger(counted, devices, _details([record], counted, index == 0))
        per_attempt.append(AttemptLedger(record.attempt, ledger))
    whole = _ledger(total, devices, _details(records, total, True))
    return Ledger(whole.wall_s, whole.device_s, whole.goodput, whole.parts, tuple(per_attempt))
