"""The Slurm executor's settings, `SlurmSettings`: `LAUNCHBAY_SLURM_QUEUES`, which Launchbay
queues go to Slurm, and how.

A JSON object from queue name to its settings, e.g.

    {"hpc": {"partition": "gpu", "account": "ml-lab", "time_limit": "04:00:00", "gpus": true}}

Every value ends up in an sbatch script, so each is checked against the characters Slurm
itself allows there; nothing from a job spec but numbers goes into the script.
"""

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
TIME_LIMIT = r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}(:\d{1,2})?)?)$"
SLURM_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$"


class SlurmQueue(BaseModel):
    """How the jobs of one Launchbay queue are submitted to Slurm."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: Annotated[str, Field(pattern=SLURM_NAME)]
    account: Annotated[str, Field(pattern=SLURM_NAME)] | None = None
    qos: Annotated[str, Field(pattern=SLURM_NAME)] | None = None
    # The allocation's limit when the job sets no timeout_s; None: the partition's default.
    time_limit: Annotated[str, Field(pattern=TIME_LIMIT)] | None = None
    # Ask for `nproc_per_node` GPUs per node (`--gpus-per-node`) for `device: auto` jobs too;
    # otherwise only `device: cuda` jobs get GPUs and the others `nproc_per_node` CPUs.
    gpus: bool = False
    # The Python that runs the supervisor on the nodes (a shared venv); None: the service's.
    python: Annotated[str, Field(pattern=r"^/[A-Za-z0-9_./+-]{1,1023}$")] | None = None


def check_queue_names(queues: dict[str, SlurmQueue]) -> None:
    from jobs.spec import QUEUE_NAME

    for name in queues:
        if not re.match(QUEUE_NAME, name):
            raise ValueError(f"LAUNCHBAY_SLURM_QUEUES: {name!r} is not a queue name")


class SlurmSettings(BaseSettings):
    """Read from the environment: `LAUNCHBAY_SLURM_QUEUES`, a JSON object from queue name to
    its `SlurmQueue` (docs/slurm.md); every other queue is RQ's."""

    model_config = SettingsConfigDict(env_prefix="LAUNCHBAY_SLURM_", extra="ignore")

    queues: dict[str, SlurmQueue] = {}

    @field_validator("queues")
    @classmethod
    def _queue_names(cls, value: dict[str, SlurmQueue]) -> dict[str, SlurmQueue]:
        check_queue_names(value)
        return value

    def owned_queues(self) -> frozenset[str]:
        return frozenset(self.queues)
