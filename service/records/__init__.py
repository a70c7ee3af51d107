"""The job records in the database: reads and writes of jobs and what they produce, shared by
the service and the worker. (The artifact store is `service.artifacts`; uploaded code,
`service.code_store`.)

One module per concern, each above the lifecycle core it builds on:

    stream       a job's live stream (everything it recorded, in seq order)
    signals      what a supervisor reads besides the state: the request for the ranks'
                 stacks (and the stacks), whether a stream watches the job
    log_search   log lines that contain a text or match a pattern, time-bounded
    webhook_outbox  the webhook deliveries a job's events make (below lifecycle)
    checkpoints  the checkpoint registry (register, list, retire)
    outputs      log lines, metric points and progress
    job_rows     create, find, list, heartbeat and delete job rows
    job_warnings what went wrong without failing a job
    nodes        the nodes of a multi-node attempt
    goodput      attempts' marks and jobs' goodput ledgers (below lifecycle)
    lifecycle    moves between states, retries, the end of an attempt, seq allocation

Callers import from `service.records`; the names below are its interface.
"""

from service.records.checkpoints import (
    delete_checkpoints,
    list_checkpoints,
    register_checkpoint,
    retired_paths,
)
from service.records.goodput import (
    LEDGER_JOB_COLUMNS,
    LedgerJob,
    ledger_body,
    ledger_job,
    read_ledgers,
    save_attempt_marks,
    stored_ledger,
)
from service.records.job_rows import (
    PENDING_REASON_MAX,
    QueuedShown,
    create_job,
    delete_job_rows,
    find_job_by_idempotency_key,
    find_jobs_on_queues,
    find_lost_jobs,
    find_queued_jobs,
    list_jobs,
    queued_since,
    read_job_state,
    record_launch_path,
    show_queued,
    touch_job_heartbeat,
)
from service.records.job_warnings import add_job_warnings
from service.records.lifecycle import (
    JOB_TABLE,
    AttemptEnd,
    AttemptSuperseded,
    TakenJob,
    add_attempt_event,
    allocate_seq,
    commit_end,
    end_attempt,
    last_sign_of_life,
    new_id,
    requeue_job,
    take_job,
    transition_job,
)
from service.records.metric_rollups import (
    delete_rollups,
    downsample,
    metric_extremes,
    metric_names,
)
from service.records.nodes import (
    NodeSeat,
    announce_node_failure,
    find_lost_nodes,
    finish_node,
    join_node,
    list_nodes,
    lose_unjoined_node,
    mark_node_running,
)
from service.records.outputs import (
    NewLogLine,
    NewMetricPoint,
    append_log_lines,
    append_metric_points,
    append_output,
    list_log_lines,
    list_metric_points,
)
from service.records.signals import (
    JobSignals,
    NewRankStack,
    mark_watched,
    read_job_signals,
    record_stacks,
)
from service.records.stream import StreamRead, StreamRow, list_job_events, read_stream

__all__ = [
    "JOB_TABLE",
    "LEDGER_JOB_COLUMNS",
    "LedgerJob",
    "ledger_body",
    "ledger_job",
    "read_ledgers",
    "save_attempt_marks",
    "stored_ledger",
    "AttemptEnd",
    "AttemptSuperseded",
    "NewLogLine",
    "NewMetricPoint",
    "NodeSeat",
    "PENDING_REASON_MAX",
    "QueuedShown",
    "StreamRead",
    "StreamRow",
    "TakenJob",
    "add_attempt_event",
    "add_job_warnings",
    "allocate_seq",
    "commit_end",
    "announce_node_failure",
    "append_log_lines",
    "append_metric_points",
    "append_output",
    "create_job",
    "delete_checkpoints",
    "delete_job_rows",
    "record_launch_path",
    "delete_rollups",
    "downsample",
    "end_attempt",
    "find_job_by_idempotency_key",
    "find_jobs_on_queues",
    "find_lost_jobs",
    "find_lost_nodes",
    "find_queued_jobs",
    "finish_node",
    "join_node",
    "last_sign_of_life",
    "list_checkpoints",
    "retired_paths",
    "list_job_events",
    "list_jobs",
    "list_log_lines",
    "list_metric_points",
    "list_nodes",
    "lose_unjoined_node",
    "mark_node_running",
    "metric_extremes",
    "metric_names",
    "new_id",
    "queued_since",
    "read_job_state",
    "read_stream",
    "JobSignals",
    "NewRankStack",
    "read_job_signals",
    "mark_watched",
    "record_stacks",
    "register_checkpoint",
    "requeue_job",
    "show_queued",
    "take_job",
    "touch_job_heartbeat",
    "transition_job",
]
