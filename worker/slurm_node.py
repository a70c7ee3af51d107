"""`python -m worker.slurm_node JOB_ID ATTEMPT`: the node entry that the sbatch scripts name
(`service.executors.slurm.script`, and those of allocations submitted by earlier versions):
`worker.node` in a Slurm allocation."""

from worker.node import main

if __name__ == "__main__":
    main(executor="slurm")
