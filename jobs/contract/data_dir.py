"""The layout of the data dir (``LAUNCHBAY_DATA_DIR``), which the API, the workers and a Slurm
allocation's supervisors share, each path written once (`DataLayout`). Running jobs and stored
data live at these paths: they do not change.

    launchbay.db          the SQLite database, when LAUNCHBAY_DATABASE_URL names none
    code/<sha256>/        an upload, unpacked (`service.code_store`)
    envs/                 the jobs' Python environments (`worker.environment`)
    runs/<job>/           a job's runs, the worker's:
      attempt-<n>/          an attempt's run directory (`node-<k>/` in it for each node of a
                            multi-node attempt: `worker.launch.RunPaths` says what is inside)
        checkpoints/        where its ranks write checkpoints (LAUNCHBAY_CHECKPOINT_DIR),
                            shared by its nodes
      slurm-<n>.out         attempt n's Slurm allocation output (`service.executors.slurm`)
    checkpoints/<job>/    the checkpoints Launchbay registered, its own copies (which no job
                          writes); in the artifact store under the same key
    artifacts/<job>/      the job's artifacts (LAUNCHBAY_OUTPUT_DIR), shared by its attempts
    supervisors/<host>/   notes of the attempts supervised on a host (`worker.orphans`)
    build-cache/<key>/    an owner's compiled extensions (`worker.build_cache`)
"""

from dataclasses import dataclass
from pathlib import Path

DATABASE = "launchbay.db"
CODE = "code"
ENVS = "envs"
RUNS = "runs"
CHECKPOINTS = "checkpoints"
ARTIFACTS = "artifacts"
SUPERVISORS = "supervisors"
BUILD_CACHE = "build-cache"
ATTEMPT_PREFIX = "attempt-"
ATTEMPT_CHECKPOINTS = "checkpoints"


@dataclass(frozen=True)
class DataLayout:
    """Every path of the data dir `root` (see the module docstring); pure: it reads and makes
    nothing."""

    root: Path

    @property
    def database(self) -> Path:
        return self.root / DATABASE

    @property
    def code(self) -> Path:
        return self.root / CODE

    @property
    def envs(self) -> Path:
        return self.root / ENVS

    @property
    def runs(self) -> Path:
        return self.root / RUNS

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def artifacts(self) -> Path:
        return self.root / ARTIFACTS

    @property
    def supervisors(self) -> Path:
        return self.root / SUPERVISORS

    @property
    def build_cache(self) -> Path:
        return self.root / BUILD_CACHE

    def upload(self, code_id: str) -> Path:
        """An uploaded code's files, unpacked."""
        return self.code / code_id

    def job_runs(self, job_id: str) -> Path:
        """The job's runs: every attempt's directory, and what the worker keeps between them."""
        return self.runs / job_id

    def attempt_dir(self, job_id: str, attempt: int) -> Path:
        return self.job_runs(job_id) / f"{ATTEMPT_PREFIX}{attempt}"

    def run_dir(self, job_id: str, attempt: int, node: int | None = None) -> Path:
        """Where an attempt runs: its own directory, or for node `node` of a multi-node
        attempt ``node-<k>/`` in it (several nodes may share the data dir, even one machine)."""
        attempt_dir = self.attempt_dir(job_id, attempt)
        return attempt_dir if node is None else attempt_dir / f"node-{node}"

    def attempt_checkpoints(self, job_id: str, attempt: int) -> Path:
        """Where an attempt's ranks write checkpoints (shared by its nodes)."""
        return self.attempt_dir(job_id, attempt) / ATTEMPT_CHECKPOINTS

    def attempts_checkpoints(self, job_id: str) -> list[Path]:
        """The attempts' checkpoint directories that are there, in attempt order."""
        found = self.job_runs(job_id).glob(f"{ATTEMPT_PREFIX}*/{ATTEMPT_CHECKPOINTS}")
        # attempt-2 before attempt-10
        return sorted(found, key=lambda path: (len(path.parent.name), path.parent.name))

    def slurm_output(self, job_id: str, attempt: int) -> Path:
        """The output of attempt `attempt`'s Slurm allocation."""
        return self.job_runs(job_id) / f"slurm-{attempt}.out"

    def kept_checkpoints(self, job_id: str) -> Path:
        """The checkpoints Launchbay registered for the job, its own copies."""
        return self.checkpoints / job_id

    def job_artifacts(self, job_id: str) -> Path:
        """LAUNCHBAY_OUTPUT_DIR: the job's artifacts, shared by its attempts, kept after it."""
        return self.artifacts / job_id

    def job_dirs(self, job_id: str) -> tuple[Path, Path, Path]:
        """Every directory of the job's own: its runs, its checkpoints, its artifacts."""
        return self.job_runs(job_id), self.kept_checkpoints(job_id), self.job_artifacts(job_id)

    def supervisor_notes(self, host: str) -> Path:
        """The notes of the attempts supervised on `host` (`worker.orphans`)."""
        return self.supervisors / host

    def owner_build_cache(self, key: str) -> Path:
        """One owner's build cache (`worker.build_cache`: `key` names the owner)."""
        return self.build_cache / key
