"""How the attempts of jobs run: the executor seam and its implementations (after torchx's
`schedulers/`), each in its own module, registered by name.

    base.py       the interface (`Executor`: plan, dry_run, submit, describe, resubmit,
                  cancel), its data (`TaskPlan`, `DryRunPlan`, `TaskStatus`, `TaskEnd`,
                  `NodePlacement`), `ExecutorUnavailable`, `submit_retry`, `lost_tasks`
    registry.py   `register`, the built-in registrations, `make_executor` (the one place that
                  routes a job's queue to its executor: `RoutingExecutor`)
    rq.py         `RQExecutor`: Redis + RQ, a task straight onto its queue; the one builder of
                  an RQ task (the dispatcher's executor is built on it)
    dispatch.py   `DispatchExecutor`: the workers' executor: RQ under the dispatcher, which
                  admits every job, and its hand-over of admitted nodes to their workers
    slurm/        `SlurmExecutor`: one Slurm batch job per attempt, for the queues in
                  LAUNCHBAY_SLURM_QUEUES (docs/slurm.md)

A new executor (Kubernetes, say) is one more module here and one `register` call
(docs/architecture.md, "The executor").
"""
