"""Jobs on a Slurm queue, through a real private Slurm (munged, slurmctld, slurmd: see
devstack/slurm.py) driven over HTTP: `sbatch` starts the allocation, `srun` the Launchbay
supervisor in it (worker.slurm_node), which runs torchrun as an RQ worker does.

One cluster and one stack (API with its reaper, one RQ worker for the side-by-side job) serve
the module; each test prints what it measured (`pytest -s`). The cluster keeps accounting (a
private slurmdbd and MariaDB) and forgets an ended job within seconds (`MinJobAge`), so
`sacct` alone knows it then, as on a production cluster. Needs root and Debian's Slurm,
slurmdbd and MariaDB (scripts/install-slurm.sh); skipped otherwise.
"""

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import make_stack
from tests.support.procs import job_processes, wait_until
from tests.support.services import private_redis
from tests.support.slurm import PARTITION, URGENT_PARTITION, SlurmCluster, unavailable
from tests.support.stack import LAUNCHBAY, Stack

pytestmark = [pytest.mark.slurm, pytest.mark.alone]

QUEUE = "hpc"
GRACE_S = 3  # LAUNCHBAY_CANCEL_GRACE_S of every Stack


def synthetic(name: str, queue: str = QUEUE, **fields: Any) -> dict[str, Any]:
    config = {"log_every_steps": 1, **fields.pop("config", {})}
    return {
        "name": name,
        "recipe": "synthetic",
        "nproc_per_node": 2,
        "queue": queue,
        "config": config,
        **fields,
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    reason = unavailable(accounting=True)
    if reason is not None:
        pytest.skip(reason)
    running = SlurmCluster(tmp_path_factory.mktemp("slurm"), accounting=True, min_job_age_s=2)
    try:
        running.start()
        print(
            f"\nprivate Slurm up in {running.started_in_s:.2f} s, of which accounting "
            f"(MariaDB, slurmdbd) {running.accounting_started_in_s:.2f} s"
        )
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def stack(cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("slurm-stack")
    queues = {QUEUE: {"partition": PARTITION, "time_limit": "10"}}
    with private_redis() as redis:
        running = make_stack(
            root / "stack",
            f"sqlite:///{root / 'launchbay.db'}",
            redis.url(),
            LAUNCHBAY_SLURM_QUEUES=json.dumps(queues),
            LAUNCHBAY_HEARTBEAT_INTERVAL_S="1",
            LAUNCHBAY_REAPER_INTERVAL_S="1",
            LAUNCHBAY_REAPER_LOST_AFTER_S="30",
            **cluster.env(),
        )
        try:
            running.start_api()
            running.start_worker()
            yield running
        finally:
            running.stop()


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client() as client:
        yield client


def submit(http: httpx.Client, spec: dict[str, Any]) -> str:
    response = http.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _slurm_records(cluster: SlurmCluster, argv: list[str], job_id: str) -> dict[int, str]:
    out = subprocess.run(
        argv, env={**os.environ, **cluster.env()}, capture_output=True, text=True, timeout=20
    ).stdout
    found = {}
    for line in out.splitlines():
        slurm_id, name, state, reason = line.split("|", 3)
        if f"-{job_id}-" in name:
            found[int(slurm_id)] = f"{state.split()[0]}|{reason}"  # sacct: "CANCELLED by 0"
    return found


def squeue_jobs(cluster: SlurmCluster, job_id: str) -> list[str]:
    """`STATE|reason` of the Slurm jobs of a Launchbay job the controller still holds."""
    held = _slurm_records(cluster, ["squeue", "-h", "--states=all", "-o", "%i|%j|%T|%r"], job_id)
    return [held[k] for k in sorted(held)]


def slurm_states(cluster: SlurmCluster, job_id: str) -> list[str]:
    """The states of the Slurm jobs of a Launchbay job, oldest first: as squeue shows them, or
    as accounting recorded those the controller has forgotten (MinJobAge after their end)."""
    recorded = _slurm_records(
        cluster,
        ["sacct", "-n", "-P", "-X", "--starttime=now-1days", "-oJobID,JobName,State,Reason"],
        job_id,
    )
    held = _slurm_records(cluster, ["squeue", "-h", "--states=all", "-o", "%i|%j|%T|%r"], job_id)
    merged = {**recorded, **held}
    return [merged[k].split("|")[0] for k in sorted(merged)]


def rank_processes(job_id: str) -> list[psutil.Process]:
    found = []
    for proc in job_processes(job_id):
        try:
            # torchrun names rank_main.py too, but only a rank has RANK.
            if "RANK" in proc.environ() and any(a.endswith("rank_main.py") for a in proc.cmdline()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def supervisors(job_id: str) -> list[psutil.Process]:
    """The job's Launchbay supervisors (`python -m worker.slurm_node JOB ...`) still alive."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        # `python -m worker.slurm_node JOB ATTEMPT` (srun's own command line names it too).
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] != psutil.STATUS_ZOMBIE and cmdline[1:4] == [
            "-m",
            "worker.slurm_node",
            job_id,
        ]:
            found.append(proc)
    return found


def checkpoint_steps(http: httpx.Client, job_id: str) -> list[int]:
    return sorted(c["step"] for c in http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"])


def log_ranks(http: httpx.Client, job_id: str) -> set[int]:
    items = http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 10_000}).json()["items"]
    return {line["rank"] for line in items}


def test_a_two_rank_job_runs_through_sbatch_like_an_rq_job(
    stack: Stack, cluster: SlurmCluster, http: httpx.Client
) -> None:
    spec = synthetic("on-slurm", config={"epochs": 1, "num_samples": 96})
    on_slurm = submit(http, spec)
    on_rq = submit(http, {**spec, "name": "on-rq", "queue": "default"})

    # Rank 0's metrics stream while it runs.
    assert wait_until(
        lambda: http.get(f"/v1/jobs/{on_slurm}/metrics").json()["items"], timeout=90
    ), stack.api_log()
    jobs = {
        job_id: stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
        for job_id in (on_slurm, on_rq)
    }
    slurm_job, rq_job = jobs[on_slurm], jobs[on_rq]
    assert slurm_job["worker"].startswith("slurm-"), slurm_job["worker"]
    assert not rq_job["worker"].startswith("slurm-")
    for job in (slurm_job, rq_job):
        print(f"\n{job['name']}: {job['created_at']} {job['started_at']} {job['finished_at']}")
    # The supervisor exits once it has recorded the end; then the allocation ends.
    assert wait_until(lambda: slurm_states(cluster, on_slurm) == ["COMPLETED"], timeout=30)
    # What users see is the same as for the job an RQ worker ran.
    for field in ("state", "exit_reason", "exit_code", "attempt", "progress"):
        assert slurm_job[field] == rq_job[field], field
    assert set(slurm_job["latest_metrics"]) == set(rq_job["latest_metrics"])
    assert checkpoint_steps(http, on_slurm) == checkpoint_steps(http, on_rq) != []
    assert log_ranks(http, on_slurm) == log_ranks(http, on_rq) >= {0, 1}
    download = http.get(f"/v1/jobs/{on_slurm}/checkpoints/latest/download")
    assert download.status_code == 200 and download.content
    # The supervisor's own output went to the file the sbatch script names.
    output = stack.data_dir / "runs" / on_slurm / "slurm-1.out"
    assert output.exists()
    assert not job_processes(on_slurm)


def test_dry_run_prints_the_sbatch_script_and_submits_nothing(
    stack: Stack, http: httpx.Client, tmp_path: Path
) -> None:
    spec_file = tmp_path / "job.json"
    spec_file.write_text(json.dumps(synthetic("dry", nnodes=2, timeout_s=600)))
    before = http.get("/v1/jobs").json()["total"]
    run = subprocess.run(
        [LAUNCHBAY, "submit", "--dry-run", str(spec_file)],
        env=stack.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    script = run.stdout
    assert script.startswith("#!/bin/bash\n")
    assert f"#SBATCH --partition={PARTITION}\n" in script
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --cpus-per-task=2\n" in script
    assert "#SBATCH --time=13\n" in script  # 600 s + grace + margin, in whole minutes
    assert "-m worker.slurm_node" in script
    assert http.get("/v1/jobs").json()["total"] == before


def fill_the_node(cluster: SlurmCluster, tmp_path: Path) -> str:
    """Someone else's allocation of every CPU of the node, running; its Slurm id."""
    blocker = cluster.sbatch(
        f"--partition={PARTITION}",
        "--exclusive",
        f"--output={tmp_path / 'blocker.out'}",
        "--wrap=sleep 600",
    )
    assert wait_until(lambda: cluster.job_state(blocker) == "RUNNING", timeout=30)
    return blocker


def test_a_job_slurm_keeps_waiting_is_queued_with_slurms_reason_then_runs(
    stack: Stack, cluster: SlurmCluster, http: httpx.Client, tmp_path: Path
) -> None:
    blocker = fill_the_node(cluster, tmp_path)
    try:
        spec = synthetic("slurm-waits", nproc_per_node=1, config={"epochs": 1, "num_samples": 32})
        job_id = submit(http, spec)

        def shows_slurms_reason() -> bool:
            job = http.get(f"/v1/jobs/{job_id}").json()
            held = squeue_jobs(cluster, job_id)
            return (
                job["state"] == "queued"
                and len(held) == 1
                and held[0].startswith("PENDING|")
                and job["pending_reason"] == "Slurm: " + held[0].split("|", 1)[1]
            )

        assert wait_until(shows_slurms_reason, timeout=30), (
            http.get(f"/v1/jobs/{job_id}").json(),
            squeue_jobs(cluster, job_id),
        )
        # The node is full: Slurm waits for resources (it says so before any other reason).
        assert http.get(f"/v1/jobs/{job_id}").json()["pending_reason"] == "Slurm: Resources"
    finally:
        cluster.scancel(blocker)
    job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
    assert job["pending_reason"] is None and job["attempt"] == 1
    assert wait_until(lambda: slurm_states(cluster, job_id) == ["COMPLETED"], timeout=30)


def test_a_job_slurm_ended_and_forgot_while_the_reaper_was_away_is_found_through_sacct(
    stack: Stack, cluster: SlurmCluster, http: httpx.Client, tmp_path: Path
) -> None:
    """The allocation ends in Slurm (an operator cancels it while it waits) with nobody of
    Launchbay told, and the controller forgets it (MinJobAge) before the reaper looks: only
    accounting knows how it ended, and the reaper records that."""
    blocker = fill_the_node(cluster, tmp_path)
    try:
        job_id = submit(http, synthetic("slurm-forgotten", nproc_per_node=1))
        assert wait_until(lambda: http.get(f"/v1/jobs/{job_id}").json()["pending_reason"], 30)
        stack.stop_api()  # and the reaper that runs in it
        try:
            cluster.scancel(f"--name=launchbay-{job_id}-1")
            assert wait_until(lambda: not squeue_jobs(cluster, job_id), timeout=60)
            assert slurm_states(cluster, job_id) == ["CANCELLED"]  # from sacct alone
            assert stored_state(stack, job_id) == "queued"
        finally:
            stack.start_api()
    finally:
        cluster.scancel(blocker)
    job = stack.wait_for_state(http, job_id, {"cancelled"}, timeout=30)
    assert job["exit_reason"] == "cancelled", job
    assert "ended CANCELLED" in job["message"], job["message"]


def stored_state(stack: Stack, job_id: str) -> str:
    """The job's state as the database holds it, read while the API is down."""
    engine = create_engine(stack.database_url)
    try:
        with engine.connect() as connection:
            return str(
                connection.execute(
                    text("SELECT state FROM job WHERE id = :id"), {"id": job_id}
                ).scalar_one()
            )
    finally:
        engine.dispose()


def running_ranks(
    stack: Stack, http: httpx.Client, job_id: str, ranks: int = 2
) -> list[psutil.Process]:
    stack.wait_for_state(http, job_id, {"running"}, timeout=90)
    assert wait_until(lambda: len(rank_processes(job_id)) == ranks, timeout=60), (
        http.get(f"/v1/jobs/{job_id}").json(),
        http.get(f"/v1/jobs/{job_id}/logs").json(),
    )
    return rank_processes(job_id)


def test_cancel_stops_the_allocation_and_leaves_no_process(
    stack: Stack, cluster: SlurmCluster, http: httpx.Client
) -> None:
    job_id = submit(http, synthetic("slurm-cancel", config={"epochs": 50, "sleep_per_step_s": 1}))
    pids = {p.pid for p in running_ranks(stack, http, job_id)}
    # The supervisor runs in the allocation with the database's URL but no token of the API.
    [supervisor] = supervisors(job_id)
    assert "LAUNCHBAY_DATABASE_URL" in supervisor.environ()
    assert "LAUNCHBAY_ADMIN_TOKEN" not in supervisor.environ()
    asked = time.monotonic()
    response = http.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 202 and response.json()["state"] == "cancelling"
    job = stack.wait_for_state(http, job_id, {"cancelled"}, timeout=GRACE_S + 15)
    took = time.monotonic() - asked
    assert job["exit_reason"] == "cancelled"
    assert not [p for p in pids if psutil.pid_exists(p)] and not job_processes(job_id)
    assert wait_until(lambda: not supervisors(job_id), timeout=10)
    assert took <= GRACE_S + 5, took
    # The allocation is over too: the supervisor left, or the reaper's scancel ended it.
    assert wait_until(
        lambda: slurm_states(cluster, job_id) in (["COMPLETED"], ["CANCELLED"]), timeout=30
    ), slurm_states(cluster, job_id)
    print(f"\nslurm cancel: cancelled {took:.2f} s after POST cancel (grace {GRACE_S} s)")


def test_a_killed_rank_fails_the_job(stack: Stack, http: httpx.Client) -> None:
    job_id = submit(
        http, synthetic("slurm-rank-killed", config={"epochs": 50, "sleep_per_step_s": 0.5})
    )
    ranks = running_ranks(stack, http, job_id)
    victim = next(p for p in ranks if p.environ().get("RANK") == "1")
    victim.send_signal(signal.SIGKILL)
    job = stack.wait_for_state(http, job_id, {"failed"}, timeout=60)
    assert job["exit_reason"] == "user_error", job
    assert job["message"].startswith("rank 1 failed (exit code -9, SIGKILL)"), job["message"]
    assert wait_until(lambda: not job_processes(job_id), timeout=5)


def test_the_slurm_time_limit_ends_the_job_as_a_timeout(
    stack: Stack, cluster: SlurmCluster, http: httpx.Client
) -> None:
    spec = synthetic("slurm-limit", nproc_per_node=1, config={"epochs": 50, "sleep_per_step_s": 1})
    job_id = submit(http, spec)
    running_ranks(stack, http, job_id, ranks=1)
    # The limit lowered below the time it has run: the controller ends it at its next check.
    cluster.scontrol("update", f"JobName=launchbay-{job_id}-1", "TimeLimit=0")
    job = stack.wait_for_state(http, job_id, {"failed"}, timeout=60)
    assert job["exit_reason"] == "timeout", job
    assert "TIMEOUT" in job["message"], job["message"]
    assert wait_until(lambda: not job_processes(job_id), timeout=5)
    assert slurm_states(cluster, job_id) == ["TIMEOUT"]


def test_a_preempted_job_is_queued_again_and_resumes_from_its_checkpoint(
    stack: Stack, cluster: SlurmCluster, http: httpx.Client, tmp_path: Path
) -> None:
    spec = synthetic(
        "slurm-preempted",
        nproc_per_node=1,
        max_retries=0,  # preemption is no failure of the job: it uses up no retry
        checkpoint={"every_steps": 1, "every_epochs": None},
        config={"epochs": 1, "num_samples": 256, "sleep_per_step_s": 0.3},
    )
    job_id = submit(http, spec)
    running_ranks(stack, http, job_id, ranks=1)
    assert wait_until(lambda: checkpoint_steps(http, job_id), timeout=60)
    # A job on the urgent partition that needs the whole node preempts the Launchbay one.
    urgent = cluster.sbatch(
        f"--partition={URGENT_PARTITION}",
        "--exclusive",
        f"--output={tmp_path / 'urgent.out'}",
        "--wrap=sleep 1",
    )
    assert wait_until(lambda: slurm_states(cluster, job_id)[:1] == ["PREEMPTED"], 60)
    job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
    assert job["attempt"] == 2, job
    events = http.get(f"/v1/jobs/{job_id}/events", timeout=30).text
    assert '"exit_reason": "preempted"' in events and '"retry_of": 1' in events
    logs = http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 10_000}).json()["items"]
    assert any(line["line"].startswith("resumed at step") for line in logs), logs[-5:]
    assert wait_until(lambda: not job_processes(job_id), timeout=5)
    del urgent


def test_a_killed_slurmd_ends_the_job_as_worker_lost(
    stack: Stack, cluster: SlurmCluster, http: httpx.Client
) -> None:
    spec = synthetic("slurm-node-lost", nproc_per_node=1, config={"epochs": 50})
    job_id = submit(http, {**spec, "config": {**spec["config"], "sleep_per_step_s": 1}})
    running_ranks(stack, http, job_id, ranks=1)
    node = cluster.nodes[0]
    cluster.kill_node(node.name)
    killed = time.monotonic()
    try:
        job = stack.wait_for_state(http, job_id, {"failed"}, timeout=90)
        took = time.monotonic() - killed
        assert job["exit_reason"] == "worker_lost", job
        assert "NODE_FAIL" in job["message"], job["message"]
        # The supervisor, still running under its step daemon, saw its attempt end.
        assert wait_until(lambda: not job_processes(job_id), timeout=GRACE_S + 10)
        assert wait_until(lambda: not supervisors(job_id), timeout=10)
    finally:
        cluster.resume_node(node)
    print(f"\nslurmd killed: the job failed as worker_lost {took:.2f} s later")
