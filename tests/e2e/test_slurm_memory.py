"""A job's memory limit under Slurm's own confinement: a private Slurm with its cgroup plugins
(`proctrack/cgroup`, `task/cgroup`, `ConstrainRAMSpace`; cgroup v1 on this machine), so the
allocation's `--mem` (the spec's `memory_limit_bytes`) is a memory cgroup Slurm enforces. A job
over it ends `failed` / `oom`, and nothing of it is left.

Its own cluster (cgroups change how every job is confined, and memory becomes a resource the
other Slurm tests do not ask for) and its own node name: slurmd's cgroups are named after the
node, and other Slurms on the machine may use the host name. Needs root, Debian's Slurm and a
writable cgroup v1 memory hierarchy; skipped otherwise.
"""

import io
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_stack
from tests.support.procs import job_processes, wait_until
from tests.support.services import private_redis
from tests.support.slurm import PARTITION, SlurmCluster, SlurmNode, unavailable
from tests.support.stack import Stack

pytestmark = [pytest.mark.slurm, pytest.mark.alone]

QUEUE = "hpc"
HOG = (Path(__file__).parents[1] / "integration" / "worker" / "scripts" / "hog.py").read_bytes()
MEMORY_CGROUPS = Path("/sys/fs/cgroup/memory")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    reason = unavailable()
    if reason is None and not os.access(MEMORY_CGROUPS, os.W_OK):
        reason = f"Slurm's task/cgroup needs a writable {MEMORY_CGROUPS}"
    if reason is not None:
        pytest.skip(reason)
    node = SlurmNode(f"lbmem-{uuid.uuid4().hex[:8]}")
    running = SlurmCluster(tmp_path_factory.mktemp("slurm-memory"), nodes=[node], cgroups=True)
    try:
        running.start()
        yield running
    finally:
        running.stop()
    assert not list(Path("/sys/fs/cgroup").glob(f"*/slurm_{node.name}"))


@pytest.fixture(scope="module")
def stack(cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("slurm-memory-stack")
    with private_redis() as redis:
        running = make_stack(
            root / "stack",
            f"sqlite:///{root / 'launchbay.db'}",
            redis.url(),
            LAUNCHBAY_SLURM_QUEUES=json.dumps({QUEUE: {"partition": PARTITION}}),
            LAUNCHBAY_HEARTBEAT_INTERVAL_S="1",
            LAUNCHBAY_REAPER_INTERVAL_S="1",
            **cluster.env(),
        )
        try:
            running.start_api()
            yield running
        finally:
            running.stop()


def slurm_records(cluster: SlurmCluster, job_id: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "--states=all", "-o", "%j|%T|%r"],
        env={**os.environ, **cluster.env()},
        capture_output=True,
        text=True,
        timeout=20,
    ).stdout
    return [line.split("|", 1)[1] for line in out.splitlines() if f"-{job_id}-" in line]


def test_a_job_over_its_memory_limit_ends_oom_under_slurms_cgroup(
    stack: Stack, cluster: SlurmCluster
) -> None:
    with stack.client() as http:
        upload = http.post("/v1/code", files={"file": ("hog.py", io.BytesIO(HOG))})
        assert upload.status_code == 201, upload.text
        spec = {
            "name": "slurm-hog",
            "code": {"code_id": upload.json()["code_id"], "entrypoint": "hog.py"},
            "launcher": "python",
            "queue": QUEUE,
            "memory_limit_bytes": 512 * 2**20,
        }
        response = http.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id = str(response.json()["id"])
        job = stack.wait_for_state(http, job_id, {"failed"}, timeout=120)
        assert job["exit_reason"] == "oom", job
        assert job["worker"].startswith("slurm-"), job
        logs = http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 10_000}).json()["items"]
        assert not any("never ran out" in line["line"] for line in logs)
    # Slurm confined the allocation to the spec's limit...
    log = cluster.log("slurmd", lines=400)
    assert "task/cgroup: _memcg_initialize: job: alloc=512MB mem.limit=512MB" in log, log
    # ...and its record says the allocation ended. The kill lands in the job's own cgroup,
    # which the supervisor makes inside Slurm's with the same limit: cgroup v1 counts an OOM
    # kill in the victim's cgroup only, so Slurm, which reads its step's count, says FAILED
    # here; where it sees the kill (cgroup v2 counts it up the tree) it says OUT_OF_MEMORY.
    # Either way the supervisor has recorded `oom` itself.
    assert wait_until(
        lambda: (
            slurm_records(cluster, job_id)[:1]
            in (["FAILED|NonZeroExitCode"], ["OUT_OF_MEMORY|OutOfMemory"])
        ),
        timeout=30,
    ), slurm_records(cluster, job_id)
    assert wait_until(lambda: not job_processes(job_id), timeout=10)
