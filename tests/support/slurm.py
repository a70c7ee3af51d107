"""A private Slurm cluster for the tests: `devstack.slurm` (shared with the benchmarks), whose
configuration is `devstack/slurm.conf.in`."""

from devstack.slurm import PARTITION, URGENT_PARTITION, SlurmCluster, SlurmNode, unavailable

__all__ = ["PARTITION", "URGENT_PARTITION", "SlurmCluster", "SlurmNode", "unavailable"]
