"""Liveness and readiness."""

from typing import Any

from fastapi import APIRouter, Request

from service.deps import RedisDep
from service.errors import ServiceUnavailable
from service.readiness import check_redis

router = APIRouter(prefix="/v1", tags=["system"])


@router.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready")
def ready(request: Request, redis: RedisDep) -> dict[str, Any]:
    """200 when the database takes a write and Redis answers; else 503 naming which, and why
    (`service.readiness`)."""
    state = request.app.state
    checks = {"database": state.database_check(state.engine), "redis": check_redis(redis)}
    failing = [
        f"{name} ({result.removeprefix('error: ')})"
        for name, result in checks.items()
        if result != "ok"
    ]
    if failing:
        raise ServiceUnavailable(f"not ready: {', '.join(failing)}", detail=checks)
    return {"status": "ready", "checks": checks}
