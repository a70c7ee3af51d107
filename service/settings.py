"""The service's settings, read from `LAUNCHBAY_*` environment variables by one cached factory.

An executor's own settings (`LAUNCHBAY_SLURM_QUEUES`) are its own model, read from the
environment by the executor registry (`service.executors.registry`)."""

import re
import socket
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from jobs.contract.data_dir import DataLayout
from jobs.spec import DEVICE_ENV, LAUNCHER_ENV

UPLOAD_PATH = "/v1/code"
ARTIFACT_STORE_PATTERN = r"^(local|s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?)$"
# Room for the multipart boundaries and part headers around the uploaded file.
UPLOAD_ENVELOPE_BYTES = 64 * 1024
# Environment a job spec may not set: the loader's and the interpreter's code-injection hooks,
# Launchbay's own variables, what torchrun sets for each rank, and the GPUs a job is given.
# `NAME*` is a prefix.
DEFAULT_FORBIDDEN_ENV = (
    "LD_*",
    "DYLD_*",
    "LAUNCHBAY_*",
    "MASTER_*",
    "TORCHELASTIC_*",
    *sorted(LAUNCHER_ENV),
    *sorted(DEVICE_ENV),
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "PYTHONEXECUTABLE",
    "PYTHONBREAKPOINT",
    "BASH_ENV",
)
# An entry of LAUNCHBAY_JOB_PASS_ENV: a name, or a prefix of names ending in `*`.
PASS_ENV_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")
# Variables an earlier version read and this one ignores, with what to say, once, when one is
# still set (`removed_variables_note`).
REMOVED_VARIABLES = {
    "LAUNCHBAY_SCHEDULER": (
        "the dispatcher admits every job now (docs/scheduling.md, 'From LAUNCHBAY_SCHEDULER'); "
        "this variable is ignored and may be removed"
    ),
}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LAUNCHBAY_", extra="ignore")

    data_dir: Path = Path("./.launchbay")
    database_url: str | None = None
    redis_url: str = "redis://localhost:6379/0"
    admin_token: str | None = Field(default=None, repr=False)
    # How long an API request waits for the database (SQLite's write lock, a new PostgreSQL
    # connection) before it answers 503 (docs/reliability.md, "Outages").
    database_wait_s: float = Field(default=5.0, gt=0, le=60)

    # Limits on what a request may carry.
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    max_log_line_bytes: int = Field(default=16 * 1024, ge=256)

    # Uploaded code (POST /v1/code): the file itself, and what an archive may unpack to.
    max_upload_bytes: int = Field(default=100 * 1024 * 1024, ge=1024)
    max_code_files: int = Field(default=10_000, ge=1)
    max_code_unpacked_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)

    # Uploaded code, per owner (docs/security.md, "Uploads"): the bytes uploaded and the bytes
    # they unpack to that an owner may keep stored, and uploads per minute (0: no limit).
    code_quota_bytes: int = Field(default=1024 * 1024 * 1024, ge=1024)
    code_quota_unpacked_bytes: int = Field(default=4 * 1024 * 1024 * 1024, ge=1024)
    uploads_per_minute: int = Field(default=20, ge=0)

    # Submission policy (POST /v1/jobs). Admins are exempt from all but `forbidden_env`.
    allow_user_code: bool = True
    max_nproc_per_node: int = Field(default=64, ge=1)
    max_nnodes: int = Field(default=64, ge=1)
    max_timeout_s: float | None = Field(default=None, gt=0)
    allowed_queues: Annotated[list[str], NoDecode] = []
    forbidden_env: Annotated[list[str], NoDecode] = list(DEFAULT_FORBIDDEN_ENV)
    # Accepted submissions per owner and minute (admins included); 0: no limit.
    submissions_per_minute: int = Field(default=60, ge=0)

    # Worker behaviour.
    cancel_grace_s: float = Field(default=10.0, ge=0)
    worker_poll_s: float = Field(default=0.1, gt=0)
    # How often a worker, and the supervisor of each running job, heartbeat.
    heartbeat_interval_s: float = Field(default=5.0, gt=0)
    # How often the supervisor of a job that holds GPUs samples them (worker/gpu_watch.py).
    gpu_sample_interval_s: float = Field(default=10.0, gt=0)
    # The ranks' collective timeout when the spec sets no hang_timeout_s (docs/reliability.md).
    collective_timeout_s: int = Field(default=1800, ge=1)
    # The address other nodes of a multi-node job reach this worker at (its rendezvous endpoint
    # and its ranks), and how long all nodes of such a job may take to join when the spec does
    # not say (docs/multi-node.md).
    worker_host: str = Field(default_factory=socket.gethostname, min_length=1)
    rendezvous_timeout_s: float = Field(default=600.0, gt=0)
    # A worker that should have GPUs (--gpus, /dev/nvidiactl, NVIDIA_VISIBLE_DEVICES) but
    # finds CUDA unusable refuses to start unless this allows its jobs to run on CPU.
    allow_cpu_fallback: bool = False

    # The reaper (docs/reliability.md): in the API unless turned off, or `launchbay reaper`.
    reaper_enabled: bool = True
    reaper_interval_s: float = Field(default=5.0, gt=0)
    # A starting/running/cancelling job with no heartbeat for this long has lost its worker;
    # keep it well above heartbeat_interval_s.
    reaper_lost_after_s: float = Field(default=20.0, gt=0)
    # A queued job whose queue entry is missing is enqueued again once queued this long.
    reaper_queued_grace_s: float = Field(default=10.0, ge=0)

    # Jobs' own environments (worker/environment.py): the cache's limit (least recently used
    # environments go first), the package index ("none": no index, only the wheelhouses) and
    # wheelhouses (`--find-links`: directories or URLs, comma-separated).
    env_cache_bytes: int = Field(default=20 * 1024**3, ge=0)
    pip_index_url: str | None = Field(default=None, repr=False)  # it may hold a password
    pip_find_links: Annotated[list[str], NoDecode] = []
    # Let jobs' requirements build source distributions (their build code runs on the worker,
    # as the worker); by default, wheels only.
    pip_allow_builds: bool = False
    # Variables of the worker's environment that jobs get too, besides the allow-list of
    # worker/passed_env.py: names, or prefixes ending in `*` (comma-separated).
    job_pass_env: Annotated[list[str], NoDecode] = []

    # Job confinement (docs/security.md): limits per node of a job, from the job's cgroup.
    # Tasks (processes and threads) a job may have at once on one node.
    job_pids_max: int = Field(default=16384, ge=16)
    # The largest `memory_limit_bytes` a user may ask for; a spec without one gets this.
    max_memory_limit_bytes: int | None = Field(default=None, gt=0)
    # A root worker runs jobs as pool users launchbay-job-0..N-1, leased with lock files in
    # this host-local directory; without root it warns, or refuses to start when required.
    # Another prefix makes a pool of its own (another install on the host, a test session):
    # `launchbay worker --remove-job-users` removes the users of the prefix set.
    job_users: int = Field(default=64, ge=1)
    job_user_lease_dir: Path = Path("/run/launchbay/job-users")
    job_user_prefix: str = Field(default="launchbay-job-", pattern=r"^[a-z_][a-z0-9_-]{0,23}-$")
    require_isolation: bool = False
    # Start the ranks of single-node jobs from a fork server with torch imported (`warm`),
    # instead of under torchrun (`cold`): docs/training-scripts.md, "Warm starts".
    warm_start: bool = True
    # A fork server with no launch for this long exits (the next job of its environment starts
    # a new one).
    warm_idle_s: float = Field(default=600.0, gt=0)
    # Disk an owner's jobs may hold (run directories, logs, checkpoints), as measured when
    # each attempt ends; past it a user's next submission is refused. Unset: no quota.
    owner_disk_quota_bytes: int | None = Field(default=None, gt=0)

    # Webhooks (docs/webhooks.md): loopback, private, link-local and metadata addresses are
    # refused unless allowed; a failed delivery is retried after `webhook_backoff_s`, doubling
    # up to an hour apart, until `webhook_retry_for_s` after the event.
    webhook_allow_private: bool = False
    webhook_delivery_enabled: bool = True
    webhook_poll_s: float = Field(default=1.0, gt=0)
    webhook_timeout_s: float = Field(default=10.0, gt=0)
    webhook_backoff_s: float = Field(default=10.0, gt=0)
    webhook_retry_for_s: float = Field(default=3 * 24 * 3600.0, gt=0)
    # The audit log (GET /v1/audit) keeps records this many days.
    audit_retention_days: float = Field(default=90.0, gt=0)
    # The longest a log search (GET /v1/logs, GET /v1/jobs/{id}/logs?q=) may run.
    log_search_timeout_s: float = Field(default=5.0, gt=0)
    # Where checkpoints and uploaded code are kept (service/artifacts/, docs/deployment.md):
    # `local` (the data dir) or `s3://bucket/prefix` on AWS or LAUNCHBAY_S3_ENDPOINT_URL, with
    # the standard AWS_* credentials. With `s3_presigned_downloads`, a download is answered
    # with a 307 to a URL of the store valid for `s3_presign_ttl_s`. A checkpoint upload that
    # fails is tried again for `checkpoint_upload_retry_s`. While a job's ranks run, a worker
    # reads its checkpoints (to hash and upload them) at most `checkpoint_upload_bytes_per_s`
    # (0: no bound), so a rank on a neighbouring core is not slowed by the memory traffic
    # (docs/benchmarks.md, P9c); once no rank is left, at full speed.
    artifact_store: str = Field(default="local", pattern=ARTIFACT_STORE_PATTERN)
    s3_endpoint_url: str | None = None
    s3_presigned_downloads: bool = False
    s3_presign_ttl_s: int = Field(default=300, ge=1, le=7 * 24 * 3600)
    checkpoint_upload_retry_s: float = Field(default=300.0, ge=0)
    checkpoint_upload_bytes_per_s: int = Field(default=64 * 1024 * 1024, ge=0)
    # Scheduling (docs/scheduling.md): every job is admitted by the API's dispatcher onto free
    # devices, by priority, fair share and quotas (per-owner weights and quotas: /v1/policies).
    # How long the dispatcher's lease lasts unless renewed, and its pass when nothing wakes it.
    dispatch_lease_s: float = Field(default=10.0, gt=0)
    dispatch_interval_s: float = Field(default=1.0, gt=0)
    # The highest `priority` a user may give (an owner's policy may say otherwise).
    max_user_priority: int = Field(default=0, ge=-1000, le=1000)
    # Recent usage (device-seconds) halves every this long, for fair share.
    fair_share_half_life_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    # The period of the device-hours quota, and of GET /v1/usage by default.
    quota_period_s: float = Field(default=24 * 3600.0, gt=0)
    # A job that cannot start for this long gets workers held for it (no starvation).
    starvation_after_s: float = Field(default=600.0, gt=0)
    # Whether a queued job may stop running jobs of lower priority to take their devices.
    preemption: bool = False
    # Flat costs (docs/benchmarks.md, "Flat costs"). How often the API process's one stream
    # notifier reads the positions of the jobs its open event streams follow.
    stream_poll_s: float = Field(default=0.05, gt=0, le=5)
    # Log bytes a job may store; past it lines are counted (`Job.log_lines_dropped`), not
    # stored, and one line in its logs says so. Unset: no cap.
    max_log_bytes_per_job: int | None = Field(default=256 * 1024 * 1024, ge=1024)
    # Scalars a job's TensorBoard files may add to its metrics (`capture: auto`); past it the
    # rest is not read, and rank 0's log says so.
    tensorboard_max_points: int = Field(default=1_000_000, ge=0)
    # The reaper deletes the metric points, and the log lines, of jobs that finished more than
    # this many days ago. Unset: kept for as long as the job.
    metrics_retention_days: float | None = Field(default=None, gt=0)
    logs_retention_days: float | None = Field(default=None, gt=0)
    # `GET /v1/jobs` counts matching jobs exactly up to this many; above, `total` is this
    # number and `total_is_estimate` is true (a count's cost grows with what it counts).
    job_count_exact_limit: int = Field(default=1000, ge=1)

    @field_validator(
        "allowed_queues", "forbidden_env", "pip_find_links", "job_pass_env", mode="before"
    )
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        """`a,b` in the environment; empty items are dropped."""
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("job_pass_env")
    @classmethod
    def _names_or_prefixes(cls, value: list[str]) -> list[str]:
        """Each a variable's name, or the start of names followed by `*` (never `*` alone:
        that would hand jobs the whole of the worker's environment again)."""
        for item in value:
            if not PASS_ENV_PATTERN.match(item):
                raise ValueError(f"{item!r} is not a variable name, nor a prefix ending in *")
        return value

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.layout.database}"

    @property
    def layout(self) -> DataLayout:
        """The paths of the data dir (resolved)."""
        return DataLayout(self.data_dir.resolve())

    @property
    def checkpoints_dir(self) -> Path:
        return self.layout.checkpoints

    @property
    def runs_dir(self) -> Path:
        return self.layout.runs

    @property
    def envs_dir(self) -> Path:
        return self.layout.envs

    @property
    def code_dir(self) -> Path:
        return self.layout.code

    def body_limit_for(self, path: str) -> int:
        """The largest request body `path` accepts: uploads get theirs plus the multipart
        envelope (the file's own size is checked exactly while it streams in)."""
        if path.rstrip("/") == UPLOAD_PATH:
            return self.max_upload_bytes + UPLOAD_ENVELOPE_BYTES
        return self.max_body_bytes


@lru_cache
def get_settings() -> Settings:
    return Settings()


def removed_variables_note(environ: Mapping[str, str]) -> list[str]:
    """One line for each variable of `REMOVED_VARIABLES` set in `environ`: what a process logs,
    once, at its start (an install's old environment must not stop it)."""
    return [
        f"{name}={environ[name]!r}: {why}"
        for name, why in REMOVED_VARIABLES.items()
        if name in environ
    ]
