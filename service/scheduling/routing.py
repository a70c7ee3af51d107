"""Which queued jobs are the dispatcher's: those of every queue that another executor does
not own. A queue scheduled elsewhere (a Slurm partition, say) is listed here, and its jobs
are neither planned, nor reserved, nor given a position or reason by the dispatcher."""

from service.settings import Settings


def queues_scheduled_elsewhere(settings: Settings) -> frozenset[str]:
    """The queues whose jobs another executor schedules: Slurm's (`LAUNCHBAY_SLURM_QUEUES`)."""
    return frozenset(settings.slurm_queues)
