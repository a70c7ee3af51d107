"""`memory_limit_bytes` is capped by LAUNCHBAY_MAX_MEMORY_LIMIT_BYTES; a spec without one gets
the maximum."""

import pytest

from jobs.spec import JobSpec
from service.auth import Principal
from service.errors import Unprocessable
from service.policy import apply_submission_policy
from service.settings import Settings

USER = Principal(name="alice", role="user")
GIB = 2**30


def spec(**fields: object) -> JobSpec:
    return JobSpec(name="m", recipe="synthetic", **fields)  # type: ignore[arg-type]


def test_over_the_maximum_is_refused() -> None:
    with pytest.raises(Unprocessable) as refused:
        apply_submission_policy(
            spec(memory_limit_bytes=8 * GIB), USER, Settings(max_memory_limit_bytes=4 * GIB)
        )
    assert refused.value.code == "policy_violation"
    assert refused.value.detail[0]["loc"] == ["body", "memory_limit_bytes"]


def test_the_maximum_is_the_default_and_no_maximum_means_no_limit() -> None:
    capped = apply_submission_policy(spec(), USER, Settings(max_memory_limit_bytes=4 * GIB))
    assert capped.memory_limit_bytes == 4 * GIB
    within = apply_submission_policy(
        spec(memory_limit_bytes=GIB), USER, Settings(max_memory_limit_bytes=4 * GIB)
    )
    assert within.memory_limit_bytes == GIB
    assert apply_submission_policy(spec(), USER, Settings()).memory_limit_bytes is None
