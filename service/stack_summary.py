"""What the ranks' stacks of one capture say: which ranks wait in a collective, which are
elsewhere, and which are behind (a pure function of the recorded rows)."""

from collections.abc import Sequence

from pydantic import BaseModel

from service.models import RankStack

# Ranks whose last output is this much older than the newest rank's are behind.
BEHIND_AFTER_S = 5.0


class StackSummary(BaseModel):
    ts: float
    reason: str
    attempt: int
    in_collective: list[int]
    elsewhere: list[int]
    # The ranks the others are waiting for: those outside the collective the others wait in,
    # else those whose output stopped well before the others'.
    behind: list[int]
    note: str


def summarize(rows: Sequence[RankStack]) -> StackSummary | None:
    """The summary of the latest capture among `rows` (None without any)."""
    if not rows:
        return None
    latest = max(rows, key=lambda r: r.ts)
    capture = sorted((r for r in rows if r.ts == latest.ts), key=lambda r: r.rank)
    waiting = [r.rank for r in capture if r.in_collective]
    elsewhere = [r.rank for r in capture if not r.in_collective]
    if waiting and elsewhere:
        behind = elsewhere
        note = (
            f"rank(s) {_ranks(waiting)} wait in a collective that rank(s) {_ranks(elsewhere)} "
            "have not joined"
        )
    else:
        behind = _quiet_ranks(capture)
        where = "in a collective" if waiting else "outside any collective"
        note = f"every rank is {where}"
        if behind:
            note += f"; rank(s) {_ranks(behind)} stopped writing output well before the others"
    return StackSummary(
        ts=latest.ts,
        reason=latest.reason,
        attempt=latest.attempt,
        in_collective=waiting,
        elsewhere=elsewhere,
        behind=behind,
        note=note,
    )


def _quiet_ranks(capture: Sequence[RankStack]) -> list[int]:
    seen = [(r.rank, r.last_output_ts) for r in capture if r.last_output_ts is not None]
    if len(seen) < 2:
        return []
    newest = max(ts for _, ts in seen if ts is not None)
    return [rank for rank, ts in seen if ts is not None and newest - ts > BEHIND_AFTER_S]


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks)
