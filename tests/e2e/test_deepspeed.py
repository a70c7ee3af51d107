"""DeepSpeed as its guide writes a training loop, in a real 2-rank gloo job on CPU: ZeRO stage
2, its checkpoint directories registered whole, a retried attempt resuming from one, and the op
DeepSpeed compiles on first use kept for the owner's next run. Its own file (a stack of its
own, the suite's longest test) so that the test processes share the other integrations."""

import io
import tarfile
from pathlib import Path

import pytest

from tests.conftest import make_stack
from tests.e2e.test_launch_styles import log_text, upload
from tests.support.procs import job_processes, wait_until
from tests.support.stack import Stack

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "integrations"


@pytest.mark.timeout(900)  # DeepSpeed compiles its communication op: ~2.5 min on 2 cores
def test_a_deepspeed_zero_job_reports_registers_its_directory_and_resumes(
    tmp_path: Path, sqlite_url: str, redis_url: str
) -> None:
    """DeepSpeed (the job's own requirement) on CPU: ZeRO stage 2 over gloo, its checkpoint
    directories registered whole, a retried attempt resuming from one, and the op DeepSpeed
    compiled on first use kept for the owner's next run instead of compiled again. DeepSpeed
    publishes only a source distribution: this worker's operator allows builds."""
    stack = make_stack(tmp_path / "stack", sqlite_url, redis_url, LAUNCHBAY_PIP_ALLOW_BUILDS="true")
    try:
        stack.start_api()
        stack.start_worker()
        _run_deepspeed_job(stack)
    finally:
        stack.stop()


def _run_deepspeed_job(stack: Stack) -> None:
    with stack.client() as http:
        code_id = upload(http, EXAMPLES / "deepspeed_zero.py")
        spec = {
            "name": "deepspeed-zero",
            "code": {"code_id": code_id, "entrypoint": "deepspeed_zero.py"},
            "launcher": "torchrun",
            "nproc_per_node": 2,
            "device": "cpu",
            "pass_local_rank_arg": "underscore",
            "environment": {"requirements": ["deepspeed==0.19.8"]},
            "args": ["--steps", "8", "--save-every", "4", "--fail-at-step", "4"],
            "max_retries": 1,
        }
        response = http.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=840)
        assert job["attempt"] == 2, "the first attempt failed on purpose after step 4"
        assert "resumed from global_step4 (step 4)" in log_text(http, job_id, 0)
        # The op the first attempt compiled, kept for the owner, is what the second loaded:
        # ninja appends a line to its log for every build, and the kept log (the second
        # attempt's, copied back when it ended) names each output once.
        cache = stack.data_dir / "build-cache"
        (log,) = cache.glob("*/torch_extensions/deepspeed_shm_comm/.ninja_log")
        outputs = [line.split("\t")[3] for line in log.read_text().splitlines()[1:]]
        assert outputs and len(outputs) == len(set(outputs)), outputs
        assert list(cache.glob("*/torch_extensions/*/*.so"))

        points = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()["items"]
        assert sorted(p["step"] for p in points if p["name"] == "loss") == list(range(1, 9))
        checkpoints = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
        assert [(Path(c["path"]).name, c["attempt"], c["kind"]) for c in checkpoints] == [
            ("global_step4", 1, "dir"),
            ("global_step8", 2, "dir"),
        ]
        download = http.get(f"/v1/jobs/{job_id}/checkpoints/latest/download")
        assert download.status_code == 200
        assert download.headers["content-type"] == "application/x-tar"
        with tarfile.open(fileobj=io.BytesIO(download.content)) as tar:
            names = {Path(n).name for n in tar.getnames()}
        assert "mp_rank_00_model_states.pt" in names
        assert {f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)} <= names
    assert wait_until(lambda: job_processes(job_id) == [], timeout=10)
