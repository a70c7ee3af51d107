"""AMP from the spec on CPU, and gradient accumulation in one process."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from jobs.runtime import (
    DistContext,
    accumulation_context,
    amp,
    autocast,
    env,
    is_accumulation_boundary,
    make_grad_scaler,
    resolve_amp,
)

CPU = DistContext(0, 0, 1, torch.device("cpu"), "gloo", True)


def test_bf16_autocast_runs_forward_and_backward_on_cpu() -> None:
    layer = nn.Linear(8, 4)
    x = torch.randn(16, 8)
    with autocast(CPU, "bf16"):
        out = layer(x)
    assert out.dtype == torch.bfloat16
    out.float().pow(2).mean().backward()
    assert layer.weight.grad is not None and layer.weight.grad.dtype == torch.float32
    with autocast(CPU, "none"):
        assert layer(x).dtype == torch.float32


def test_amp_mode_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.AMP, "bf16")
    with autocast(CPU):
        assert nn.Linear(2, 2)(torch.randn(1, 2)).dtype == torch.bfloat16


def test_fp16_on_cpu_falls_back_to_bf16_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amp, "_warned", set())
    with pytest.warns(RuntimeWarning, match="fp16 needs a CUDA device"):
        assert resolve_amp("fp16", torch.device("cpu")) == "bf16"
    scaler = make_grad_scaler("fp16", torch.device("cpu"))
    assert not scaler.is_enabled(), "no loss scaling without fp16 on CUDA"
    with pytest.raises(ValueError):
        resolve_amp("int4", torch.device("cpu"))


def test_accumulated_micro_batches_equal_one_large_batch() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(16, 6), torch.randn(16, 1)
    large, small = nn.Linear(6, 1), nn.Linear(6, 1)
    small.load_state_dict(large.state_dict())
    nn.functional.mse_loss(large(x), y).backward()
    accum = 4
    for micro, (xb, yb) in enumerate(zip(x.chunk(accum), y.chunk(accum), strict=True)):
        with accumulation_context(small, micro, accum):
            (nn.functional.mse_loss(small(xb), yb) / accum).backward()
        assert is_accumulation_boundary(micro, accum) == (micro == accum - 1)
    assert large.weight.grad is not None and small.weight.grad is not None
    torch.testing.assert_close(small.weight.grad, large.weight.grad)


@pytest.mark.parametrize(("native", "mode"), [(True, "bf16"), (False, "fp16")])
def test_bf16_on_a_gpu_without_native_bf16_falls_back_to_fp16(
    native: bool, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pre-Ampere GPU (T4, V100) emulates bf16, which torch counts as support by default."""
    asked: list[dict[str, object]] = []

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        asked.append({"including_emulation": including_emulation})
        return native or including_emulation

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    monkeypatch.setattr(amp, "_warned", set())
    if native:
        assert resolve_amp("bf16", torch.device("cuda", 0)) == mode
    else:
        with pytest.warns(RuntimeWarning, match="bf16 is not native on this GPU"):
            assert resolve_amp("bf16", torch.device("cuda", 0)) == mode
    assert asked == [{"including_emulation": False}]
