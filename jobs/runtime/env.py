"""The environment contract between the Launchbay worker and the code inside the ranks.

The worker passes everything through environment variables (see DESIGN.md, "Inside the
ranks"). This module is the one place that names and parses them, so a typo in a variable
name cannot hide in a helper. It reads ``os.environ`` on every call on purpose: tests and
launchers change the environment, and none of these lookups sit on a hot path.

It imports no torch, so it is cheap to import anywhere.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

JOB_ID = "LAUNCHBAY_JOB_ID"
ATTEMPT = "LAUNCHBAY_ATTEMPT"
EVENTS_FILE = "LAUNCHBAY_EVENTS_FILE"
CHECKPOINT_DIR = "LAUNCHBAY_CHECKPOINT_DIR"
RESUME_FROM = "LAUNCHBAY_RESUME_FROM"
CONFIG = "LAUNCHBAY_CONFIG"
AMP = "LAUNCHBAY_AMP"
DEVICE = "LAUNCHBAY_DEVICE"
BACKEND = "LAUNCHBAY_BACKEND"
CHECKPOINT = "LAUNCHBAY_CHECKPOINT"
COLLECTIVE_TIMEOUT_S = "LAUNCHBAY_COLLECTIVE_TIMEOUT_S"
# The attempt's log directory: each rank's log and error record (worker/rank_main.py).
LOG_DIR = "LAUNCHBAY_LOG_DIR"

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


@dataclass(frozen=True)
class CheckpointPolicy:
    """When to save, from the job spec's `checkpoint` block (LAUNCHBAY_CHECKPOINT).

    ``keep_last``, ``best_metric`` and ``best_mode`` are carried for completeness: the
    worker applies retention when it registers checkpoints, because only it knows which
    files it has copied and which one is best; the ranks never delete checkpoints.
    """

    every_steps: int | None = None
    every_epochs: int | None = 1
    keep_last: int | None = 3
    best_metric: str | None = None
    best_mode: Literal["min", "max"] = "min"

    def is_due(self, step: int, epoch: int, end_of_epoch: bool) -> bool:
        """Whether a checkpoint is due after optimizer step `step` (1-based) of `epoch`."""
        if self.every_steps and step > 0 and step % self.every_steps == 0:
            return True
        return bool(end_of_epoch and self.every_epochs and epoch % self.every_epochs == 0)


def _optional_positive_int(raw: dict[str, Any], key: str, default: int | None) -> int | None:
    if key not in raw:
        return default
    value = raw[key]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RuntimeEnvError(f"{CHECKPOINT}.{key} must be a non-negative integer or null")
    return value or None


def checkpoint_policy() -> CheckpointPolicy:
    """The policy in LAUNCHBAY_CHECKPOINT; the spec's defaults (every epoch) when unset."""
    raw = _json_object(CHECKPOINT)
    mode: Literal["min", "max"]
    match raw.get("best_mode") or "min":
        case "min":
            mode = "min"
        case "max":
            mode = "max"
        case other:
            raise RuntimeEnvError(f"{CHECKPOINT}.best_mode must be 'min' or 'max', got {other!r}")
    best_metric = raw.get("best_metric")
    return CheckpointPolicy(
        every_steps=_optional_positive_int(raw, "every_steps", None),
        every_epochs=_optional_positive_int(raw, "every_epochs", 1),
        keep_last=_optional_positive_int(raw, "keep_last", 3),
        best_metric=str(best_metric) if best_metric else None,
        best_mode=mode,
    )
