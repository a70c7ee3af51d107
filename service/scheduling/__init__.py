"""The dispatcher (docs/scheduling.md): one API process at a time admits queued jobs onto
specific devices of specific workers, by priority, fair share and quotas, all nodes of a job
at once, then hands each node to its worker.

    planner       what to admit now, and why each other job waits (pure, no I/O)
    capacity      the workers' capacity records and what is reserved on them
    usage         device-seconds per owner: decayed for fair share, per period for quotas
    policies      owners' weights, quotas and priority limits (database rows, admin routes)
    lease         the leader lease with its fencing token
    waiting       the queue as a pass reads it, and each waiting job's position and reason
    reservations  what a pass reads of the reservations (which to release, whom to preempt)
    admission     the transaction that releases and admits, checked against the lease
    readmission   a job admitted onto a worker gone before taking it, queued as its next attempt
    dispatch_pass what one pass read, its plan and admission rounds, and its report
    dispatcher    the thread in each API process that takes the lease and dispatches
    submission    what a submission must meet (its priority; could it ever fit?)

Its executor, the RQ one whose `submit` wakes the dispatcher and which hands admitted nodes
over to their workers, is `service.executors.dispatch`.
"""
