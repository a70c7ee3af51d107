"""What a worker says about itself in GET /v1/workers."""

import pytest

from worker.main import device_ids
from worker.prepare import CudaInfo


@pytest.mark.parametrize(
    ("cuda", "visible", "expected"),
    [
        (CudaInfo(False, 0), None, ["cpu"]),
        (CudaInfo(True, 2), None, ["0", "1"]),
        (CudaInfo(True, 2), "3,5", ["3", "5"]),
        (CudaInfo(True, 1), "GPU-abc", ["GPU-abc"]),
    ],
)
def test_device_ids(
    cuda: CudaInfo, visible: str | None, expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert device_ids(cuda) == expected
