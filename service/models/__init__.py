"""Database tables.

Every row a job produces (state events, metric points, log lines, checkpoints) carries a
`seq` drawn from the job's own counter (`Job.last_seq`) in the same transaction as the
insert, so `seq` is one dense, monotonic order per job: the id of the live event stream.

The tables live by concern: `jobs` (a job's row, events, nodes, tags), `outputs` (metrics,
logs, checkpoints, stacks), `access` (tokens, uploads, the audit log), `webhooks`,
`scheduling` (the dispatcher's), `goodput` (the ledger's), `health` (the write check's), on
the column types of `columns`. Import them from here.
"""

from sqlmodel import SQLModel

from service.models.access import ApiToken, AuditRecord, CodeUpload
from service.models.columns import BigIntPK, StrEnumColumn, inline_enum, utcnow
from service.models.goodput import AttemptMark, JobGoodput
from service.models.health import WriteCheck
from service.models.jobs import Job, JobBase, JobEvent, JobNode, JobTag
from service.models.outputs import Checkpoint, LogLine, MetricPoint, MetricRollup, RankStack
from service.models.scheduling import DispatcherLease, JobReservation, OwnerPolicy
from service.models.webhooks import Webhook, WebhookDelivery

__all__ = [
    "ApiToken",
    "AttemptMark",
    "AuditRecord",
    "BigIntPK",
    "Checkpoint",
    "CodeUpload",
    "DispatcherLease",
    "Job",
    "JobBase",
    "JobEvent",
    "JobGoodput",
    "JobNode",
    "JobReservation",
    "JobTag",
    "LogLine",
    "MetricPoint",
    "MetricRollup",
    "OwnerPolicy",
    "RankStack",
    "SQLModel",
    "StrEnumColumn",
    "Webhook",
    "WebhookDelivery",
    "WriteCheck",
    "inline_enum",
    "utcnow",
]
