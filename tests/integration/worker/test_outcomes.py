"""Attempts that run to their own end under real torchrun: success, a failing rank, elastic
restarts, the `python` launcher, and programs that cannot be launched."""

import hashlib
import uuid

import pytest
from rq import Queue

from jobs.states import AttemptRef, JobState
from service.db import session_scope
from service.executors.rq import rq_job_id
from service.records import transition_job
from tests.integration.worker.conftest import WorkerEnv
from tests.support.attempts import run_attempt
from worker import devices
from worker.devices import WorkerDevices


def states(env: WorkerEnv, job_id: str) -> list[str]:
    return [e.data["state"] for e in env.events(job_id) if e.kind == "state"]


def check_ddp_success(env: WorkerEnv) -> None:
    job_id = env.submit("ddp_ok.py", args=["--flag"])
    result = env.run(job_id)
    job = env.job(job_id)

    assert job.state == "succeeded", job.message
    assert (job.exit_code, job.exit_reason, job.worker) == (0, "completed", "test-worker")
    assert job.started_at is not None and job.finished_at is not None
    assert states(env, job_id) == ["queued", "starting", "running", "succeeded"]
    assert result.recorded and len(result.processes) >= 3  # torchrun and its two ranks

    logs = env.logs(job_id)
    assert {line.rank for line in logs} == {0, 1}
    rank0 = [line.line for line in logs if line.rank == 0]
    rank1 = [line.line for line in logs if line.rank == 1]
    assert "hello from rank 0 of 2 argv=['--flag']" in rank0
    assert "rank 1 warning on stderr" in rank1 and "rank 1 done" in rank1

    points = env.metrics(job_id)
    assert [(p.name, p.step, p.value) for p in points] == [
        ("loss", step, 1.0 / step) for step in range(1, 6)
    ] + [("loss", 6, 0.1)]  # the last line had no newline: taken once the ranks are gone
    assert points[1].ts == 1234.5 and all(p.ts > 1e9 for p in points if p.step != 2)
    assert job.progress_step == 6 and job.latest_metrics == {"loss": 0.1}
    # The reasons, with line numbers, where the user reads: the message and rank 0's log.
    assert job.message is not None
    assert job.message.startswith("3 invalid events-file line(s) skipped (line 6: "), job.message
    assert "line 7: " in job.message and "line 8: " in job.message
    skipped = [line for line in rank0 if line.startswith("[launchbay] events file line ")]
    assert [line.split(":")[0] for line in skipped] == [
        f"[launchbay] events file line {n}" for n in (6, 7, 8)
    ]

    [checkpoint] = env.checkpoints(job_id)
    file = env.settings.data_dir.resolve() / checkpoint.path
    assert checkpoint.path == f"checkpoints/{job_id}/step-5.pt"
    assert checkpoint.sha256 == hashlib.sha256(file.read_bytes()).hexdigest()
    assert (checkpoint.size, checkpoint.step, checkpoint.attempt) == (file.stat().st_size, 5, 1)
    assert checkpoint.metrics == {"loss": 0.2}

    seqs = [row.seq for table in (logs, points, env.events(job_id), [checkpoint]) for row in table]
    assert len(seqs) == len(set(seqs))
    assert [p.seq for p in points] == sorted({p.seq for p in points})


def test_ddp_job_succeeds_with_logs_metrics_and_checkpoint(wenv: WorkerEnv) -> None:
    check_ddp_success(wenv)


@pytest.mark.postgres
def test_ddp_job_succeeds_on_postgres(pg_wenv: WorkerEnv) -> None:
    check_ddp_success(pg_wenv)


def test_failing_rank_is_named_with_its_error(wenv: WorkerEnv) -> None:
    job_id = wenv.submit("fail_rank.py")
    result = wenv.run(job_id)
    job = wenv.job(job_id)

    assert (job.state, job.exit_reason, job.exit_code) == ("failed", "user_error", 1)
    assert job.message is not None
    first, *rest = job.message.splitlines()
    assert first == "rank 1 failed (exit code 1): RuntimeError: synthetic failure on rank 1"
    assert "Traceback (most recent call last):" in rest
    assert any("in step" in line for line in rest)
    assert rest[-1] == "RuntimeError: synthetic failure on rank 1"
    assert result.processes and not result.survivors


def test_a_failure_with_retries_left_is_retried_then_fails(wenv: WorkerEnv) -> None:
    job_id = wenv.submit("fail_rank.py", max_retries=1, queue=f"retries-{uuid.uuid4().hex[:8]}")
    first = wenv.run(job_id)

    assert first.retried and first.recorded
    job = wenv.job(job_id)
    assert (job.state, job.attempt, job.exit_reason, job.worker) == ("queued", 2, None, None)
    assert job.message is not None and job.message.startswith(
        "retry 1 of 1: attempt 1 ended with user_error: rank 1 failed"
    )
    queue = Queue(job.queue, connection=wenv.redis)
    assert queue.job_ids == [rq_job_id(job_id, 2)], "the retry is enqueued"

    second = wenv.run(job_id, attempt=2)
    assert not second.retried
    job = wenv.job(job_id)
    assert (job.state, job.attempt, job.exit_reason) == ("failed", 2, "user_error")
    assert states(wenv, job_id) == [
        *("queued", "starting", "running"),
        *("queued", "starting", "running", "failed"),
    ]


def test_elastic_restart_is_recorded_and_local_rank_passed(wenv: WorkerEnv) -> None:
    job_id = wenv.submit("flaky.py", max_restarts=1, pass_local_rank_arg=True, args=["x"])
    wenv.run(job_id)
    job = wenv.job(job_id)

    assert job.state == "succeeded", job.message
    restarts = [e.data for e in wenv.events(job_id) if e.kind == "restart"]
    assert restarts == [{"restart": 1, "max_restarts": 1}]
    rank1 = [line.line for line in wenv.logs(job_id) if line.rank == 1]
    assert "rank 1 restart 0 argv=['--local-rank=1', 'x']" in rank1
    assert "[launchbay] rank 1 started again (elastic restart 1)" in rank1


def test_a_restart_s_event_comes_between_the_runs_points(wenv: WorkerEnv) -> None:
    """Step 1 reported by each run of the ranks: the restart event's seq lies between the two
    points, so the points of one attempt's runs are told apart (the ingestor stores what the
    first run wrote before the restart is recorded, whatever its pace)."""
    job_id = wenv.submit("restart_points.py", max_restarts=1)
    wenv.run(job_id)
    assert wenv.job(job_id).state == "succeeded"
    [restart] = [e.seq for e in wenv.events(job_id) if e.kind == "restart"]
    runs = {int(p.value): p.seq for p in wenv.metrics(job_id) if p.name == "run"}
    assert runs[0] < restart < runs[1], (runs, restart)


def test_python_launcher_runs_one_process(wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "_assigned", WorkerDevices(cpu_slots=4))  # `--slots 4`
    job_id = wenv.submit("single.py", launcher="python", nproc_per_node=3, args=["a"])
    result = wenv.run(job_id)
    job = wenv.job(job_id)

    assert job.state == "succeeded", job.message
    lines = {line.line.split(" ", 1)[0]: line.line.split(" ", 1)[1] for line in wenv.logs(job_id)}
    assert '"MASTER_ADDR": "127.0.0.1"' in lines["env"] and '"WORLD_SIZE": "3"' in lines["env"]
    assert '"RANK": null' in lines["env"] and '"OMP_NUM_THREADS": "1"' in lines["env"]
    assert lines["argv"] == '["a"]'
    # The process runs in the attempt's working directory, its own copy of the code.
    assert lines["cwd"] == str(result.paths.work_dir)
    assert [(p.name, p.value) for p in wenv.metrics(job_id)] == [("acc", 0.5)]


def test_python_launcher_failure(wenv: WorkerEnv) -> None:
    job_id = wenv.submit("single.py", launcher="python", args=["--fail"])
    wenv.run(job_id)
    job = wenv.job(job_id)

    assert (job.state, job.exit_reason, job.exit_code) == ("failed", "user_error", 1)
    assert job.message is not None
    assert job.message.startswith(
        "rank 0 failed (exit code 1): ValueError: single process failed on purpose"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"entrypoint": "nope.py"}, "entrypoint 'nope.py' is not a file in the uploaded code"),
        ({"device": "cuda"}, "device=cuda, but this worker has no CUDA device"),
        ({"backend": "nccl"}, "backend=nccl needs CUDA devices; use gloo (or auto) on CPU"),
    ],
)
def test_launch_errors(wenv: WorkerEnv, spec: dict[str, str], message: str) -> None:
    job_id = wenv.submit("single.py", **spec)
    result = wenv.run(job_id)
    job = wenv.job(job_id)

    assert (job.state, job.exit_reason, job.message) == ("failed", "launch_error", message)
    assert result.processes == []
    assert states(wenv, job_id) == ["queued", "starting", "failed"]


def test_a_job_larger_than_the_worker_is_not_launched(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(devices, "_assigned", WorkerDevices(cpu_slots=4))  # `--slots 4`
    job_id = wenv.submit("single.py", launcher="python", nproc_per_node=5)
    result = wenv.run(job_id)
    job = wenv.job(job_id)

    message = (
        "nproc_per_node=5, but this worker has 4 CPU slot(s): set nproc_per_node: 4 (or fewer) "
        "in the job spec, or submit it to a queue whose workers have 5 or more"
    )
    assert (job.state, job.exit_reason, job.message) == ("failed", "launch_error", message)
    assert result.processes == []


def test_attempt_not_queued_is_left_alone(wenv: WorkerEnv) -> None:
    job_id = wenv.submit("single.py")
    with session_scope(wenv.engine) as session:
        assert transition_job(session, job_id, JobState.CANCELLED)
    assert run_attempt(wenv.services(), AttemptRef(job_id, 1), worker_name="w") is None
    assert run_attempt(wenv.services(), AttemptRef(job_id, 2), worker_name="w") is None
    assert wenv.job(job_id).state == "cancelled"
