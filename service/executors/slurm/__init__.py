"""Slurm as an executor (docs/slurm.md): jobs on the queues named in `LAUNCHBAY_SLURM_QUEUES`
are submitted with `sbatch` as one allocation; inside it `srun` starts the Launchbay
supervisor on each node (`worker.slurm_node`, which is `worker.node --executor slurm`).

    queues.py     `SlurmSettings` and the per-queue configuration (partition, account...)
    script.py     the sbatch script of an attempt (pure; what `submit --dry-run` prints)
    states.py     Slurm job states -> whether a task is live, or how its attempt ended
    commands.py   sbatch / squeue / sacct / scancel, run and parsed
    executor.py   `SlurmExecutor` (service.executors.base.Executor)
    allocation.py where a node of an allocation runs (`worker.node` asks it)
"""
