"""The worker side: take a job off the queue, launch it with torchrun, supervise its processes,
ingest what its ranks write, and record how it ended.

    tasks.run_job (RQ entry point, in the worker) -> attempt.take_attempt, attempt.run_taken
        prepare: checks, directories, code        launch: the pure argv/env builder
        monitor: the supervisor loop, with
            process_tree (start, stop)      ingest + events (logs, metrics)  checkpoints
        heartbeat: the attempt's heartbeat, in a thread beside the loop
        outcome: why it ended; attempt_end records it (a retried failure goes back to the
            queue as the next attempt)
    node: the same take_attempt and run_taken on a node of an executor's allocation, no RQ
        (slurm_node: the name Slurm's sbatch scripts call it by)
    rq_worker.run_worker: the RQ worker process (`launchbay worker`) and its own heartbeat
    devices: the GPUs or CPU slots a worker owns, its jobs' size limit, GPUs kept apart
    orphans: stop what attempts whose supervisor died left behind
    lifeline.py: starts the launcher so that it dies with its supervisor
    rank_main.py: the first code of every rank (its log file, its error record, dying with
        its launcher)
"""
