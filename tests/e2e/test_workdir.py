"""Programs as their authors wrote them, run unmodified through the API (real worker as root,
real torchrun with gloo): PyTorch's DDP tutorial script writes `snapshot.pt` to its working
directory, which is a writable copy of its code; what it writes is kept as the job's artifacts;
declared as a checkpoint (`outputs.checkpoints`), its snapshot is registered, kept, and put back
where the script looks for it when a retry starts, so the retry resumes from it."""

import hashlib
import io
import re
import signal
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import torch

from tests.e2e.conftest import stack_of_its_own
from tests.support.procs import job_processes, wait_until
from tests.support.stack import Stack

TUTORIAL = Path(__file__).parent / "programs" / "ddp_tutorial_series"
RESUMED = re.compile(r"^Resuming training from snapshot at Epoch (\d+)$")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_of_its_own(tmp_path_factory.mktemp("workdir")) as running:
        yield running


@pytest.fixture(scope="module")
def code_id(stack: Stack) -> str:
    """The tutorial's two files, zipped as a user's directory is."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in ("multigpu_torchrun.py", "datautils.py"):
            archive.write(TUTORIAL / name, name)
    with stack.client() as http:
        files = {"file": ("tutorial.zip", buffer.getvalue(), "application/zip")}
        response = http.post("/v1/code", files=files)
    assert response.status_code == 201, response.text
    return str(response.json()["code_id"])


def submit(http: httpx.Client, code_id: str, name: str, args: list[str], **spec: Any) -> str:
    body = {
        "name": name,
        "code": {"code_id": code_id, "entrypoint": "multigpu_torchrun.py"},
        "nproc_per_node": 2,
        "args": args,
        **spec,
    }
    response = http.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def finished(http: httpx.Client, job_id: str, timeout: float = 180) -> dict[str, Any]:
    def done() -> bool:
        state = http.get(f"/v1/jobs/{job_id}").json()["state"]
        return state in ("succeeded", "failed", "cancelled")

    assert wait_until(done, timeout=timeout, interval=0.5)
    job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").json()
    return job


def lines(http: httpx.Client, job_id: str, rank: int) -> list[str]:
    params: dict[str, Any] = {"rank": rank, "limit": 10_000}
    return [
        item["line"] for item in http.get(f"/v1/jobs/{job_id}/logs", params=params).json()["items"]
    ]


def snapshot_of(data: bytes) -> dict[str, Any]:
    snapshot: dict[str, Any] = torch.load(io.BytesIO(data), weights_only=True)
    return snapshot


def test_the_ddp_tutorial_runs_unmodified_and_what_it_writes_to_dot_is_kept(
    stack: Stack, code_id: str
) -> None:
    with stack.client() as http:
        job_id = submit(http, code_id, "ddp-tutorial", ["30", "10"])
        job = finished(http, job_id)
        assert (job["state"], job["attempt"]) == ("succeeded", 1), job["message"]
        # One process group of two: the DistributedSampler gave each rank half of 2048 samples.
        for rank in (0, 1):
            assert f"[GPU{rank}] Epoch 29 | Batchsize: 32 | Steps: 32" in lines(http, job_id, rank)
        assert "Epoch 20 | Training snapshot saved at snapshot.pt" in lines(http, job_id, 0)

        items = http.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]
        assert [item["path"] for item in items] == ["snapshot.pt"]  # not its code
        response = http.get(f"/v1/jobs/{job_id}/artifacts/snapshot.pt")
        assert response.status_code == 200
        snapshot = snapshot_of(response.content)
        assert snapshot["EPOCHS_RUN"] == 20 and set(snapshot["MODEL_STATE"]) == {"weight", "bias"}
    attempt = stack.data_dir / "runs" / job_id / "attempt-1"
    assert not (attempt / "work").exists() and not (attempt / "home").exists()


def kill_rank_1(job_id: str) -> None:
    for proc in job_processes(job_id):
        try:
            env, cmdline = proc.environ(), proc.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if env.get("RANK") == "1" and any(arg.endswith("rank_main.py") for arg in cmdline):
            proc.send_signal(signal.SIGKILL)


def test_a_declared_snapshot_is_registered_and_a_retry_resumes_from_it(
    stack: Stack, code_id: str
) -> None:
    """The first attempt loses a rank once its second snapshot is registered; the retry finds
    that snapshot at ./snapshot.pt, as the script expects, and resumes from it. (A snapshot is
    registered once it has stayed the same for a second: 50 epochs of this script, 2.5 s and
    more here, leave it that; 150 epochs after the second leave time to stop a rank before
    the job ends, under a loaded CI.)"""
    with stack.client() as http:
        job_id = submit(
            http, code_id, "ddp-tutorial-retry", ["200", "50"],
            outputs={"checkpoints": ["snapshot.pt"]}, max_retries=1,
        )  # fmt: skip
        seen: list[str] = []

        def second_snapshot_registered() -> bool:
            items = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
            seen.extend(item["id"] for item in items if item["id"] not in seen)
            return len(seen) >= 2

        assert wait_until(second_snapshot_registered, timeout=120, interval=0.1)
        kill_rank_1(job_id)
        job = finished(http, job_id)
        assert (job["state"], job["attempt"]) == ("succeeded", 2), job["message"]

        rank0 = lines(http, job_id, 0)
        resumed = [int(m.group(1)) for m in map(RESUMED.match, rank0) if m]
        assert len(resumed) == 1 and resumed[0] >= 50, rank0  # only the retry found one
        assert rank0.count("Loading snapshot") == 1

        [checkpoint] = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
        assert checkpoint["path"] == f"checkpoints/{job_id}/work/snapshot.pt"
        assert (checkpoint["attempt"], checkpoint["step"]) == (2, None)
        response = http.get(f"/v1/jobs/{job_id}/checkpoints/latest/download")
        assert response.status_code == 200
        assert hashlib.sha256(response.content).hexdigest() == checkpoint["sha256"]
        assert response.headers["etag"] == f'"{checkpoint["sha256"]}"'
        assert snapshot_of(response.content)["EPOCHS_RUN"] == 150
        # A checkpoint, not an artifact.
        assert http.get(f"/v1/jobs/{job_id}/artifacts").json()["items"] == []
