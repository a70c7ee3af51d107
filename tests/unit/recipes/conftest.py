"""Recipe tests start without the worker's LAUNCHBAY_* variables or torchrun's."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from jobs.runtime import env

RUNTIME_VARS = [
    value
    for name, value in vars(env).items()
    if name.isupper() and isinstance(value, str) and value.startswith("LAUNCHBAY_")
] + ["RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"]


@pytest.fixture(autouse=True)
def clean_runtime_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in RUNTIME_VARS:
        if name in os.environ:
            monkeypatch.delenv(name)
    yield
    from jobs.runtime import teardown_distributed

    teardown_distributed()  # closes the events file too
