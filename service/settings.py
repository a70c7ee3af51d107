"""Every setting, read from `LAUNCHBAY_*` environment variables by one cached factory."""

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

UPLOAD_PATH = "/v1/code"
# Room for the multipart boundaries and part headers around the uploaded file.
UPLOAD_ENVELOPE_BYTES = 64 * 1024


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LAUNCHBAY_", extra="ignore")

    data_dir: Path = Path("./.launchbay")
    database_url: str | None = None
    redis_url: str = "redis://localhost:6379/0"
    admin_token: str | None = None

    # Limits on what a request may carry.
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    max_log_line_bytes: int = Field(default=16 * 1024, ge=256)

    # Uploaded code (POST /v1/code): the file itself, and what an archive may unpack to.
    max_upload_bytes: int = Field(default=100 * 1024 * 1024, ge=1024)
    max_code_files: int = Field(default=10_000, ge=1)
    max_code_unpacked_bytes: int = Field(default=1024 * 1024 * 1024, ge=1024)

    # Worker behaviour.
    cancel_grace_s: float = Field(default=10.0, ge=0)
    worker_poll_s: float = Field(default=0.1, gt=0)
    job_timeout_s: int = Field(default=7 * 24 * 3600, ge=60)

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir.resolve() / 'launchbay.db'}"

    @property
    def checkpoints_dir(self) -> Path:
        return self.data_dir.resolve() / "checkpoints"

    @property
    def runs_dir(self) -> Path:
        return self.data_dir.resolve() / "runs"

    @property
    def code_dir(self) -> Path:
        return self.data_dir.resolve() / "code"

    def body_limit_for(self, path: str) -> int:
        """The largest request body `path` accepts: uploads get theirs plus the multipart
        envelope (the file's own size is checked exactly while it streams in)."""
        if path.rstrip("/") == UPLOAD_PATH:
            return self.max_upload_bytes + UPLOAD_ENVELOPE_BYTES
        return self.max_body_bytes


@lru_cache
def get_settings() -> Settings:
    return Settings()
