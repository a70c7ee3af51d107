"""A job's GPUs are its worker's to give: a spec whose `env` names other GPUs (stored before
the API refused those names, or by a policy that lets them through) still gets, in every
rank, the first `nproc_per_node` of its worker's GPUs, numbered as nvidia-smi numbers them.
The API's refusal of the same names is tested in tests/integration/test_policy.py."""

import json

import pytest

from tests.integration.worker.conftest import WorkerEnv
from worker import devices
from worker.devices import WorkerDevices

# Every variable a job could use to reach GPUs its worker does not own.
ATTACK = {
    "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
    "CUDA_DEVICE_ORDER": "FASTEST_FIRST",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "HIP_VISIBLE_DEVICES": "0,1,2,3",
    "ROCR_VISIBLE_DEVICES": "0,1,2,3",
}


def test_a_spec_cannot_give_its_ranks_gpus_its_worker_does_not_own(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ATTACK:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(devices, "_assigned", WorkerDevices(gpus=("2", "3", "5")))
    job_id = wenv.submit("gpu_env.py", nproc_per_node=2, env=ATTACK)
    wenv.run(job_id)
    job = wenv.job(job_id)
    assert job.state == "succeeded", job.message

    seen = {
        row.rank: json.loads(row.line.removeprefix("gpu-env "))
        for row in wenv.logs(job_id)
        if row.line.startswith("gpu-env ")
    }
    given = {
        "CUDA_VISIBLE_DEVICES": "2,3",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NVIDIA_VISIBLE_DEVICES": None,
        "HIP_VISIBLE_DEVICES": None,
        "ROCR_VISIBLE_DEVICES": None,
    }
    assert seen == {0: given, 1: given}
