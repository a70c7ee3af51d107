"""Mixed precision from the job spec's `amp` field (LAUNCHBAY_AMP: none | fp16 | bf16).

fp16 needs loss scaling (GradScaler) and is only worth it on CUDA; bf16 needs no scaler and
also runs on CPU. A mode the device cannot do is replaced by the nearest one that works,
with a warning in the job's log, rather than failing a job that would train fine without it.
"""

from __future__ import annotations

import warnings
from contextlib import AbstractContextManager, nullcontext

import torch

from jobs.runtime import env
from jobs.runtime.distributed import DistContext, get_context

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
_warned: set[str] = set()


def _fallback(message: str, mode: str) -> str:
    """Say once per process that the requested mode was replaced (it is asked every step)."""
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    return mode


def _native_bf16() -> bool:
    """Whether the current GPU computes in bf16 itself: torch counts emulation as support
    unless asked not to."""
    return bool(torch.cuda.is_bf16_supported(including_emulation=False))


def resolve_amp(amp: str | None = None, device: torch.device | None = None) -> str:
    """The AMP mode to use on `device`: `amp` (default LAUNCHBAY_AMP) after device fallbacks.

    fp16 on CPU becomes bf16 (CPU autocast is built for bf16 and GradScaler buys nothing
    there); bf16 on a GPU without native bf16 (before Ampere: T4, V100) becomes fp16 with
    loss scaling, which is faster there than the emulated bf16 that torch would accept.
    """
    mode = (amp or env.amp_mode()).lower()
    if mode not in env.AMP_MODES:
        raise ValueError(f"amp must be one of {', '.join(env.AMP_MODES)}, got {mode!r}")
    device = device or get_context().device
    if mode == "fp16" and device.type != "cuda":
        return _fallback("amp=fp16 needs a CUDA device; using bf16 autocast on CPU instead", "bf16")
    if mode == "bf16" and device.type == "cuda" and not _native_bf16():
        return _fallback("amp=bf16 is not native on this GPU; using fp16 instead", "fp16")
    return mode


def autocast(
    ctx: DistContext | None = None, amp: str | None = None
) -> AbstractContextManager[None]:
    """The autocast context for the forward pass and loss; a no-op context for amp=none."""
    device = (ctx or get_context()).device
    mode = resolve_amp(amp, device)
    if mode == "none":
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=_DTYPES[mode])


def make_grad_scaler(
    amp: str | None = None, device: torch.device | None = None
) -> torch.amp.GradScaler:
    """A GradScaler that is enabled only for fp16 on CUDA.

    A disabled scaler passes scale()/step()/update() straight through, so one loop body
    serves every mode, and its (empty) state still round-trips through checkpoints.
    """
    device = device or get_context().device
    mode = resolve_amp(amp, device)
    return torch.amp.GradScaler(device.type, enabled=mode == "fp16" and device.type == "cuda")
