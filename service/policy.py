"""What a caller may submit, and how often.

The submission policy comes from settings (`LAUNCHBAY_ALLOW_USER_CODE`,
`LAUNCHBAY_MAX_NPROC_PER_NODE`, `LAUNCHBAY_MAX_NNODES`, `LAUNCHBAY_MAX_TIMEOUT_S`,
`LAUNCHBAY_ALLOWED_QUEUES`, `LAUNCHBAY_FORBIDDEN_ENV`). Admins are exempt from all of it but
the forbidden environment names: those variables belong to Launchbay and torchrun, or load
code, whoever asks. Byte limits (request body, upload) hold for everyone and are enforced
before a route runs (`service.limits`, `service.uploads`).

Submissions are also rate limited per owner (`LAUNCHBAY_SUBMISSIONS_PER_MINUTE`), admins
included: a fixed one-minute window counted in Redis. When Redis does not answer, the
limiter lets the submission through rather than fail it.
"""

import logging
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from jobs.spec import JobSpec
from jobs.startup_env import startup_env_names
from service.auth import Principal
from service.errors import Forbidden, TooManyRequests, Unprocessable
from service.settings import Settings

log = logging.getLogger("launchbay.api")

RATE_KEY = "launchbay:rate:submit:{owner}:{window}"
WINDOW_S = 60


def forbidden_env_names(names: Iterable[str], patterns: Sequence[str]) -> list[str]:
    """The names that match a pattern (`NAME`, or `PREFIX*`), compared case-insensitively."""
    exact = {p.upper() for p in patterns if not p.endswith("*")}
    prefixes = tuple(p[:-1].upper() for p in patterns if p.endswith("*"))
    return sorted(n for n in names if n.upper() in exact or n.upper().startswith(prefixes))


def check_may_run_code(principal: Principal, settings: Settings) -> None:
    """403 for a user when the service runs built-in recipes only."""
    if not principal.is_admin and not settings.allow_user_code:
        raise Forbidden(
            "this service runs only built-in recipes for users (see GET /v1/recipes)",
            code="code_not_allowed",
        )


def apply_submission_policy(spec: JobSpec, principal: Principal, settings: Settings) -> JobSpec:
    """Refuse what the policy forbids (422, 403 for code); returns the spec to store, with
    `timeout_s` set to the maximum when the policy has one and the spec none."""
    # The start-up names are refused whatever the setting says (see jobs.startup_env).
    bad_env = sorted(
        {*forbidden_env_names(spec.env, settings.forbidden_env), *startup_env_names(spec.env)}
    )
    if bad_env:
        why = "Launchbay or torchrun sets it, or it loads other code"
        raise Unprocessable(
            f"a job spec may not set the environment variable{'s' * (len(bad_env) > 1)} "
            f"{', '.join(bad_env)}",
            code="forbidden_env",
            detail=[_violation(("env", name), why, "forbidden_env") for name in bad_env],
        )
    if principal.is_admin:
        return spec
    if spec.code is not None:
        check_may_run_code(principal, settings)
    violations = []
    if spec.nproc_per_node > settings.max_nproc_per_node:
        violations.append(_violation(("nproc_per_node",), f"at most {settings.max_nproc_per_node}"))
    if spec.nnodes > settings.max_nnodes:
        violations.append(_violation(("nnodes",), f"at most {settings.max_nnodes}"))
    if settings.allowed_queues and spec.queue not in settings.allowed_queues:
        allowed = ", ".join(settings.allowed_queues)
        violations.append(_violation(("queue",), f"one of {allowed}"))
    limit = settings.max_timeout_s
    if limit is not None and spec.timeout_s is not None and spec.timeout_s > limit:
        violations.append(_violation(("timeout_s",), f"at most {limit:g}"))
    memory_max = settings.max_memory_limit_bytes
    memory = spec.memory_limit_bytes
    if memory_max is not None and memory is not None and memory > memory_max:
        violations.append(_violation(("memory_limit_bytes",), f"at most {memory_max}"))
    if violations:
        fields = "; ".join(f"{v['loc'][-1]}: {v['msg']}" for v in violations)
        raise Unprocessable(
            f"the job spec goes beyond this service's policy ({fields})",
            code="policy_violation",
            detail=violations,
        )
    defaults: dict[str, Any] = {}
    if limit is not None and spec.timeout_s is None:
        defaults["timeout_s"] = limit
    if memory_max is not None and memory is None:
        defaults["memory_limit_bytes"] = memory_max
    return spec.model_copy(update=defaults) if defaults else spec


def _violation(loc: tuple[str, ...], msg: str, kind: str = "policy") -> dict[str, Any]:
    return {"loc": ["body", *loc], "msg": msg, "type": kind}


def check_submission_rate(
    redis: Redis, owner: str, per_minute: int, *, now: float | None = None
) -> None:
    """Count one submission of `owner` in this minute's window; 429 with Retry-After past
    `per_minute` (0: no limit). Redis errors let the submission through."""
    check_rate(redis, RATE_KEY, owner, per_minute, what="job submissions", now=now)


def check_rate(
    redis: Redis,
    key_template: str,
    owner: str,
    per_minute: int,
    *,
    what: str,
    now: float | None = None,
) -> None:
    """Count one `what` of `owner` in this minute's window (`key_template` with `{owner}` and
    `{window}`); 429 with Retry-After past `per_minute` (0: no limit). Redis errors let the
    request through."""
    if per_minute <= 0:
        return
    now = time.time() if now is None else now
    window = int(now // WINDOW_S)
    key = key_template.format(owner=owner, window=window)
    try:
        pipe = redis.pipeline(transaction=True)
        pipe.incr(key)
        pipe.expire(key, 2 * WINDOW_S)
        count = int(pipe.execute()[0])
    except RedisError as exc:
        log.warning("rate limiter unavailable, %s of %s let through: %s", what, owner, exc)
        return
    if count > per_minute:
        retry_after = max(1, math.ceil((window + 1) * WINDOW_S - now))
        raise TooManyRequests(
            f"more than {per_minute} {what} in a minute; retry in {retry_after} s",
            detail={"limit_per_minute": per_minute, "retry_after_s": retry_after},
            headers={"Retry-After": str(retry_after)},
        )
