"""Liveness and readiness."""

from typing import Any

from fastapi import APIRouter
from redis.exceptions import RedisError
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from service.deps import RedisDep, SessionDep
from service.errors import ServiceUnavailable

router = APIRouter(prefix="/v1", tags=["system"])


@router.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready")
def ready(session: SessionDep, redis: RedisDep) -> dict[str, Any]:
    checks: dict[str, str] = {}
    try:
        session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except SQLAlchemyError as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        redis.ping()
        checks["redis"] = "ok"
    except RedisError as exc:
        checks["redis"] = f"error: {type(exc).__name__}"
    failing = sorted(name for name, result in checks.items() if result != "ok")
    if failing:
        raise ServiceUnavailable(f"not ready: {', '.join(failing)} unreachable", detail=checks)
    return {"status": "ready", "checks": checks}
