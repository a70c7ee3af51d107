"""Every runtime test starts without the worker's LAUNCHBAY_* contract variables or
torchrun's, and leaves no process group, open events file or queued reporting behind."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from jobs.runtime import env, queue_reports, teardown_distributed

CONTRACT_VARS = {
    value
    for name, value in vars(env).items()
    if name.isupper() and isinstance(value, str) and value.startswith("LAUNCHBAY_")
}
TORCHRUN_VARS = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
}


@pytest.fixture(autouse=True)
def clean_runtime_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in CONTRACT_VARS | TORCHRUN_VARS:
        if name in os.environ:
            monkeypatch.delenv(name)
    yield
    queue_reports(None)
    teardown_distributed()  # closes the events file too
