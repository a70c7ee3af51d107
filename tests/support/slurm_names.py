"""The Slurm job names Launchbay gives its attempts
(`service.executors.slurm.script.slurm_job_name`), read back: the service never needs to, the
tests do."""

from service.executors.slurm.script import JOB_NAME_PREFIX


def parse_slurm_job_name(name: str) -> tuple[str, int] | None:
    """(job id, attempt) of a name made by `slurm_job_name`; None for any other."""
    if not name.startswith(JOB_NAME_PREFIX):
        return None
    job_id, _, attempt = name[len(JOB_NAME_PREFIX) :].rpartition("-")
    if not job_id or not attempt.isdigit():
        return None
    return job_id, int(attempt)
