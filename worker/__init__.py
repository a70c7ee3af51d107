"""The worker side: take a job off the queue, launch it with torchrun, supervise its processes,
ingest what its ranks write, and record how it ended.

    tasks.run_job (RQ entry point) -> attempt.run_attempt
        prepare: checks, directories, code        launch: the pure argv/env builder
        monitor: the supervisor loop, with
            supervise (process tree, stop)  ingest + events (logs, metrics)  checkpoints
        outcome: why it ended
    main.run_worker: the RQ worker process (`launchbay worker`)
    rank_main.py: the first code of every rank (its log file, its error record)
"""
