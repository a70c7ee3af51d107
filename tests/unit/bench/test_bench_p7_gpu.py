"""P7 on a GPU host: which GPUs it samples, and no CUDA context in the benchmark process."""

import pytest

from bench import p7_gpu
from bench.p7_gpu import Target, find_target, parse_utilisation

SMI = """\
GPU-aaaa-1111, 10
GPU-bbbb-2222, 90
GPU-cccc-3333, 0
"""


def test_utilisation_is_the_mean_over_the_visible_gpus_only() -> None:
    assert parse_utilisation(SMI, ("GPU-bbbb-2222", "gpu-CCCC-3333")) == 45.0
    assert parse_utilisation(SMI) == pytest.approx(100 / 3)
    with pytest.raises(ValueError, match="GPU-dddd"):
        parse_utilisation(SMI, ("GPU-dddd",))


def test_the_target_is_found_without_touching_cuda_here(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    def no_cuda_here(*args: object, **kwargs: object) -> None:
        raise AssertionError("the benchmark process must not make a CUDA context")

    for name in ("is_available", "device_count", "get_device_name", "get_device_properties"):
        monkeypatch.setattr(torch.cuda, name, no_cuda_here)
    monkeypatch.delenv("LAUNCHBAY_BENCH_P7_DEVICE", raising=False)
    fake = (
        "import json, os; assert os.environ['CUDA_DEVICE_ORDER'] == 'PCI_BUS_ID'; "
        "print(json.dumps([2, 'NVIDIA H100 80GB HBM3', ['aaaa-1111', 'bbbb-2222']]))"
    )
    monkeypatch.setattr(p7_gpu, "_CUDA_PROBE", fake)
    assert find_target() == Target(
        "cuda", "nccl", 2, "NVIDIA H100 80GB HBM3", ("GPU-aaaa-1111", "GPU-bbbb-2222")
    )
    monkeypatch.setattr(p7_gpu, "_CUDA_PROBE", "print('[0, null, []]')")
    assert find_target() is None
