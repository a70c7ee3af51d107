"""Every launch style of examples/scripts/, uploaded with POST /v1/code and run by a real
worker: torchrun with the SDK, a `--local_rank` script (both started warm, naming no launcher),
mp.spawn, DataParallel, accelerate (`launcher: torchrun`: cold)."""

import importlib.util
import io
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from tests.support.procs import job_processes, wait_until
from tests.support.stack import Stack

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "scripts"
LINEAR = {"weight", "bias"}

STYLES: dict[str, dict[str, Any]] = {
    "torchrun": {
        "script": "train_torchrun.py",
        # No launcher named: started warm (`launch_path`), as torchrun would start it.
        "spec": {"nproc_per_node": 2, "args": ["--steps", "10"]},
        "keys": LINEAR,
        "rank_logs": {0: "rank 0 of 2 (LOCAL_RANK=0)", 1: "rank 1 of 2 (LOCAL_RANK=1)"},
    },
    "local_rank_arg": {
        "script": "train_local_rank_arg.py",
        "spec": {"nproc_per_node": 2, "pass_local_rank_arg": True},
        "keys": LINEAR,
        "rank_logs": {0: "--local_rank=0", 1: "--local_rank=1"},
    },
    "mp_spawn": {
        "script": "train_mp_spawn.py",
        "spec": {"launcher": "python", "nproc_per_node": 2},
        "keys": LINEAR,
        # One process started by the worker; each rank it spawns logs under its own rank.
        "rank_logs": {0: "rank 0 of 2", 1: "rank 1 of 2"},
    },
    "dataparallel": {
        "script": "train_dataparallel.py",
        "spec": {"launcher": "python", "nproc_per_node": 1},
        "keys": {"0.weight", "0.bias", "2.weight", "2.bias"},
        "rank_logs": {0: "DataParallel over"},
    },
    "accelerate": {
        "script": "train_accelerate.py",
        "spec": {
            "launcher": "torchrun",
            "nproc_per_node": 2,
            "env": {"ACCELERATE_USE_CPU": "1"},
        },
        "keys": LINEAR,
        "rank_logs": {0: "process 0 of 2", 1: "process 1 of 2"},
    },
}


def upload(http: httpx.Client, path: Path) -> str:
    with path.open("rb") as fh:
        response = http.post("/v1/code", files={"file": (path.name, fh, "text/x-python")})
    assert response.status_code == 201, response.text
    code_id: str = response.json()["code_id"]
    return code_id


def log_text(http: httpx.Client, job_id: str, rank: int) -> str:
    params = {"rank": rank, "limit": 10_000}
    items = http.get(f"/v1/jobs/{job_id}/logs", params=params).json()["items"]
    return "\n".join(item["line"] for item in items)


@pytest.mark.parametrize("style", sorted(STYLES))
def test_each_launch_style_runs_to_success(shared_sqlite_stack: Stack, style: str) -> None:
    case = STYLES[style]
    if style == "accelerate" and importlib.util.find_spec("accelerate") is None:
        pytest.skip("accelerate is not installed")
    with shared_sqlite_stack.client() as http:
        code_id = upload(http, SCRIPTS / case["script"])
        spec = {
            "name": f"{style}-example",
            "code": {"code_id": code_id, "entrypoint": case["script"]},
            "device": "cpu",
            **case["spec"],
        }
        response = http.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        job = shared_sqlite_stack.wait_for_state(http, job_id, {"succeeded"}, timeout=180)
        assert (job["exit_code"], job["exit_reason"]) == (0, "completed")
        assert job["launch_path"] == ("cold" if "launcher" in case["spec"] else "warm")

        points = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()["items"]
        assert points and {p["name"] for p in points} == {"loss"}
        steps = [p["step"] for p in points]
        assert steps == sorted(set(steps)), "each step reported once, by one process"
        assert job["latest_metrics"]["loss"] == points[-1]["value"]

        for rank, expected in case["rank_logs"].items():
            text = log_text(http, job_id, rank)
            assert expected in text, f"rank {rank} log of {style}:\n{text}"

        checkpoints = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
        assert checkpoints, f"{style} registered no checkpoint"
        download = http.get(f"/v1/jobs/{job_id}/checkpoints/latest/download")
        assert download.status_code == 200
        state = torch.load(io.BytesIO(download.content), map_location="cpu", weights_only=True)
        assert set(state["model"]) == case["keys"], "the unwrapped model, no 'module.' prefix"
    assert wait_until(lambda: job_processes(job_id) == [], timeout=10)
