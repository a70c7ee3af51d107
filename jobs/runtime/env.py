"""The environment contract between the Launchbay worker and the code inside the ranks.

The worker passes everything through environment variables (README, "Inside the ranks"),
named once in `jobs.contract.env`; this module parses them, so a typo in a variable name
cannot hide in a helper. It reads ``os.environ`` on every call on purpose: tests and
launchers change the environment, and none of these lookups sit on a hot path.

It imports no torch, so it is cheap to import anywhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import ValidationError

from jobs.contract.checkpoints import CheckpointPolicy
from jobs.contract.env import (
    AMP,
    ATTEMPT,
    BACKEND,
    CHECKPOINT,
    CHECKPOINT_DIR,
    COLLECTIVE_TIMEOUT_S,
    CONFIG,
    DEVICE,
    EVENTS_FILE,
    JOB_ID,
    LOG_DIR,
    RESUME_FROM,
)

__all__ = [
    "AMP",
    "ATTEMPT",
    "BACKEND",
    "CHECKPOINT",
    "CHECKPOINT_DIR",
    "COLLECTIVE_TIMEOUT_S",
    "CONFIG",
    "DEVICE",
    "EVENTS_FILE",
    "JOB_ID",
    "LOG_DIR",
    "RESUME_FROM",
    "CheckpointPolicy",
    "RuntimeEnvError",
]

AmpMode = Literal["none", "fp16", "bf16"]
DeviceChoice = Literal["auto", "cpu", "cuda"]
BackendChoice = Literal["auto", "gloo", "nccl"]

AMP_MODES: tuple[AmpMode, ...] = ("none", "fp16", "bf16")
DEVICE_CHOICES: tuple[DeviceChoice, ...] = ("auto", "cpu", "cuda")
BACKEND_CHOICES: tuple[BackendChoice, ...] = ("auto", "gloo", "nccl")

# Where a plain `python train.py` (no worker) puts its checkpoints.
DEFAULT_CHECKPOINT_DIR = "checkpoints"


class RuntimeEnvError(ValueError):
    """A LAUNCHBAY_* variable holds a value the runtime cannot use."""


def _get(name: str) -> str | None:
    """The variable's value, or None when it is unset or blank (the worker may set "")."""
    value = os.environ.get(name, "").strip()
    return value or None


def _choice(name: str, allowed: tuple[str, ...], default: str) -> str:
    value = (_get(name) or default).lower()
    if value not in allowed:
        raise RuntimeEnvError(f"{name}={value!r}: expected one of {', '.join(allowed)}")
    return value


def _json_object(name: str) -> dict[str, Any]:
    raw = _get(name)
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RuntimeEnvError(f"{name} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise RuntimeEnvError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def read_config() -> dict[str, Any]:
    """The recipe config from LAUNCHBAY_CONFIG (a JSON object); {} when unset."""
    return _json_object(CONFIG)


def amp_mode() -> AmpMode:
    """The requested mixed-precision mode (LAUNCHBAY_AMP), before any device fallback."""
    return cast(AmpMode, _choice(AMP, AMP_MODES, "none"))


def device_choice() -> DeviceChoice:
    return cast(DeviceChoice, _choice(DEVICE, DEVICE_CHOICES, "auto"))


def backend_choice() -> BackendChoice:
    return cast(BackendChoice, _choice(BACKEND, BACKEND_CHOICES, "auto"))


def collective_timeout_s() -> int | None:
    """Seconds a collective may wait before the process group gives up; None: torch's default."""
    raw = _get(COLLECTIVE_TIMEOUT_S)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise RuntimeEnvError(f"{COLLECTIVE_TIMEOUT_S}={raw!r} is not an integer") from exc
    if value <= 0:
        raise RuntimeEnvError(f"{COLLECTIVE_TIMEOUT_S} must be positive, got {value}")
    return value


def events_file() -> str | None:
    return _get(EVENTS_FILE)


def checkpoint_dir() -> Path:
    """Where checkpoints go: LAUNCHBAY_CHECKPOINT_DIR, else ./checkpoints for a local run."""
    return Path(_get(CHECKPOINT_DIR) or DEFAULT_CHECKPOINT_DIR)


def log_dir() -> Path | None:
    raw = _get(LOG_DIR)
    return Path(raw) if raw else None


def resume_from() -> Path | None:
    raw = _get(RESUME_FROM)
    return Path(raw) if raw else None


def job_id() -> str | None:
    return _get(JOB_ID)


def attempt() -> int | None:
    raw = _get(ATTEMPT)
    return int(raw) if raw and raw.isdigit() else None


def checkpoint_policy() -> CheckpointPolicy:
    """The policy in LAUNCHBAY_CHECKPOINT; the spec's defaults (every epoch) when unset."""
    raw = _json_object(CHECKPOINT)
    try:
        return CheckpointPolicy.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise RuntimeEnvError(f"{CHECKPOINT} is not a checkpoint policy: {problems}") from None
