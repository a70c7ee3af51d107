"""The Slurm command-line tools Launchbay runs, and the parsing of what they print.

The CLI rather than slurmrestd: every Slurm site has `sbatch`, `squeue` and `scancel` on its
login nodes, authenticated by munge as the Unix user who runs them, while slurmrestd is an
optional daemon that many sites do not run and that needs JWT or a local socket set up. The
commands' text output with an explicit `-o` format is stable across Slurm versions.

Every failure to run a command (missing, timed out, the controller away) is
`ExecutorUnavailable`; a submission Slurm refuses is `SlurmRefused`, its subclass.
"""

import logging
import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from service.executors.base import ExecutorUnavailable

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_S = 30.0
# Names per squeue / sacct call, to keep the command line short.
NAMES_PER_CALL = 100
# squeue and sacct: `<slurm job id>|<job name>|<state>|<reason>`.
SQUEUE_FORMAT = "%i|%j|%T|%r"
SACCT_FIELDS = "JobID,JobName,State,Reason"


# What sbatch must not carry into the job's environment (`--export=ALL`): the service's
# tokens. The supervisor needs the database and Redis URLs, and keeps them from the ranks.
NOT_EXPORTED = frozenset({"LAUNCHBAY_ADMIN_TOKEN", "LAUNCHBAY_TOKEN"})


class SlurmRefused(ExecutorUnavailable):
    """Slurm answered and refused (an unknown partition or account, a limit...)."""


@dataclass(frozen=True)
class SlurmJob:
    slurm_id: str
    name: str
    state: str
    reason: str | None


def client_env() -> dict[str, str]:
    """The environment for a Slurm client: ours without the variables of an allocation we
    may run inside (the supervisor submits a retry from within its own allocation), which
    sbatch would otherwise take as options."""
    return {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("SLURM_") and k != "SLURM_CONF") and not k.startswith("SBATCH_")
    }


def submit_env() -> dict[str, str]:
    """The environment sbatch runs with, and exports to the job: `client_env` without the
    service's tokens."""
    return {k: v for k, v in client_env().items() if k not in NOT_EXPORTED}


def run_command(argv: Sequence[str], stdin: str | None = None) -> str:
    try:
        done = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            env=submit_env(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExecutorUnavailable(f"{argv[0]}: {exc}") from exc
    if done.returncode != 0:
        error = done.stderr.strip() or f"exit status {done.returncode}"
        if _unreachable(error):
            raise ExecutorUnavailable(f"{argv[0]}: {error}")
        raise SlurmRefused(f"{argv[0]}: {error}")
    return done.stdout


def _unreachable(error: str) -> bool:
    lowered = error.lower()
    return any(
        words in lowered
        for words in ("unable to contact", "connection refused", "timed out", "munge", "socket")
    )


def sbatch(script: str) -> str:
    """Submit a batch script (on stdin); the new Slurm job's id."""
    out = run_command(["sbatch", "--parsable"], stdin=script)
    return out.strip().split(";")[0]


def parse_job_lines(text: str) -> list[SlurmJob]:
    """Lines of `id|name|state|reason`; malformed ones are skipped."""
    found = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or not parts[0]:
            continue
        reason = parts[3].strip() if len(parts) > 3 and parts[3].strip() else None
        found.append(SlurmJob(parts[0].strip(), parts[1].strip(), parts[2].strip(), reason))
    return found


def _chunks(names: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(names), NAMES_PER_CALL):
        yield names[start : start + NAMES_PER_CALL]


def squeue(names: Sequence[str]) -> list[SlurmJob]:
    """The jobs the controller still holds with these names, pending, running or ended."""
    jobs: list[SlurmJob] = []
    for chunk in _chunks(names):
        out = run_command(
            ["squeue", "-h", "--states=all", f"--name={','.join(chunk)}", f"-o{SQUEUE_FORMAT}"]
        )
        jobs += parse_job_lines(out)
    return jobs


def sacct(names: Sequence[str]) -> list[SlurmJob]:
    """The accounting records of these job names (allocations only, not steps); empty when
    the cluster keeps no accounting."""
    jobs: list[SlurmJob] = []
    for chunk in _chunks(names):
        try:
            out = run_command(
                [
                    "sacct",
                    "-n",
                    "-P",
                    "-X",
                    "--starttime=now-30days",
                    f"--name={','.join(chunk)}",
                    f"--format={SACCT_FIELDS}",
                ]
            )
        except SlurmRefused as exc:
            log.debug("sacct: %s", exc)  # accounting disabled: nothing to learn
            return []
        jobs += parse_job_lines(out)
    return jobs


def scancel(name: str) -> None:
    """Cancel every Slurm job of ours with this name (pending or running)."""
    run_command(["scancel", f"--name={name}"])
