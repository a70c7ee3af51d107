"""Started multi-node attempts one of whose nodes' worker went away after the admission but
before that node joined: the nodes that joined would wait for it in the rendezvous until it
times out (`rendezvous_timeout_s`, 600 s by default), holding their devices. The dispatcher
finds them in each pass (`unjoined_lost_nodes`) and ends such an attempt once it has seen
the worker gone for half of `reaper_lost_after_s` (`UnjoinedNodes.end_lost`), as the reaper
ends one whose joined node stopped heartbeating (docs/scheduling.md, "Hand-over")."""

import logging
import time
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from redis import Redis
from sqlalchemy import Connection, select
from sqlalchemy.engine import Engine
from sqlmodel import Session

from jobs.states import JobState
from service.executors.dispatch import wake_dispatcher
from service.models import JobNode
from service.records import lose_unjoined_node
from service.scheduling.capacity import ActiveReservation
from service.scheduling.reservations import ReservedJob
from service.settings import Settings

log = logging.getLogger("launchbay.dispatcher")
_node = JobNode.__table__  # type: ignore[attr-defined]
# (job id, attempt, node)
NodeKey = tuple[str, int, int]


def unjoined_lost_nodes(
    connection: Connection,
    reservations: Sequence[ActiveReservation],
    jobs: dict[str, ReservedJob],
    live_workers: Collection[str],
) -> list[ActiveReservation]:
    """The reservations of started multi-node attempts on a worker that went away before it
    joined its node (a single-node attempt has no nodes to join: the reaper follows it). The
    nodes that joined would wait for it until the rendezvous times out
    (`service.records.lose_unjoined_node` ends the attempt instead). The nodes are read only
    when such a worker is gone."""
    started = (JobState.STARTING, JobState.RUNNING)
    nodes = Counter((r.job_id, r.attempt) for r in reservations)  # one per node
    gone = []
    for r in reservations:
        job = jobs.get(r.job_id)
        if r.worker in live_workers or nodes[r.job_id, r.attempt] < 2 or job is None:
            continue
        if job.attempt == r.attempt and job.state in started:
            gone.append(r)
    if not gone:
        return []
    rows = connection.execute(
        select(_node.c.job_id, _node.c.attempt, _node.c.node).where(
            _node.c.job_id.in_(sorted({r.job_id for r in gone}))
        )
    )
    joined = {(job_id, attempt, node) for job_id, attempt, node in rows}
    return [r for r in gone if (r.job_id, r.attempt, r.node) not in joined]


@dataclass
class UnjoinedNodes:
    """Since when (monotonic) the dispatcher has seen each such node."""

    since: dict[NodeKey, float] = field(default_factory=dict)

    def end_lost(
        self,
        engine: Engine,
        redis: Redis,
        settings: Settings,
        unjoined: Sequence[ActiveReservation],
    ) -> None:
        """End the attempt of each node of `unjoined` (this pass's) seen for half of
        `reaper_lost_after_s` (`service.records.lose_unjoined_node`): a worker whose record
        Redis lost (a restart) writes it again at its next heartbeat, and a frozen one is
        seen gone only once silent for about as long (`Dispatcher._capacity`)."""
        now = time.monotonic()
        nodes = {(r.job_id, r.attempt, r.node): r for r in unjoined}
        self.since = {key: self.since.get(key, now) for key in nodes}
        for key, since in self.since.items():
            if now - since < settings.reaper_lost_after_s / 2:
                continue
            r = nodes[key]
            message = f"worker {r.worker} went away before the node joined"
            with Session(engine) as session:
                end = lose_unjoined_node(
                    session, r.job_id, r.attempt, r.node, worker=r.worker, message=message
                )
            if end.recorded:
                outcome = "retrying" if end.retried is not None else "failed"
                log.warning("job %s attempt %d: node %d: %s; %s", *key, message, outcome)
            if end.retried is not None:
                wake_dispatcher(redis)  # the next pass admits the retry
