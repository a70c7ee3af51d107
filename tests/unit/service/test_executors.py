"""The executor registry (`service.executors.registry`): which executor runs each queue's
jobs, each executor's settings of its own, the backends' secrets, a node's placement."""

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from pydantic import BaseModel
from redis import Redis
from sqlalchemy import create_engine

from jobs.spec import JobSpec
from jobs.states import AttemptRef, JobState
from service.executors import registry
from service.executors.base import DryRunPlan, NodePlacement, TaskPlan, TaskStatus
from service.executors.dispatch import DispatchExecutor
from service.executors.registry import (
    ExecutorContext,
    RoutingExecutor,
    make_executor,
    parts_of,
    placement_for,
    register,
    routed_queues,
    secret_env,
)
from service.executors.rq import attempt_of_call, attempt_tasks, run_job_args
from service.executors.slurm import commands
from service.executors.slurm.executor import SlurmExecutor
from service.executors.slurm.queues import SlurmQueue, SlurmSettings
from service.executors.slurm.script import slurm_job_name
from service.models import Job
from service.settings import Settings

QUEUE = SlurmQueue(partition="gpu", account="ml-lab", time_limit="04:00:00")
REDIS = Redis.from_url("redis://127.0.0.1:1/0")
ENGINE = create_engine("sqlite://")


def job(queue: str, attempt: int = 1) -> Job:
    spec = JobSpec.model_validate({"name": "j", "recipe": "synthetic", "queue": queue})
    return Job(
        id="a" * 32,
        name="j",
        state=JobState.QUEUED,
        spec=spec.model_dump(mode="json"),
        queue=queue,
        attempt=attempt,
    )


class Recording:
    """An executor that notes what it was asked."""

    name = "recording"
    reports_ends = False
    secret_env = frozenset({"RECORDING_KEY"})

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def plan(self, job: Job) -> list[TaskPlan]:
        return [TaskPlan("rec", job.id, job.attempt, None)]

    def dry_run(self, job: Job) -> DryRunPlan:
        return DryRunPlan(self.name, self.plan(job), "the text")

    def submit(self, job: Job) -> None:
        self.calls.append(("submit", job.queue))

    def describe(self, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]:
        self.calls += [("describe", j.queue) for j in jobs]
        return {j.id: [TaskStatus("rec", live=True)] for j in jobs}

    def resubmit(self, job: Job, task_ids: Sequence[str]) -> None:
        self.calls.append(("resubmit", job.queue))

    def cancel(self, job: Job) -> None:
        self.calls.append(("cancel", job.queue))


class RecordingSettings(BaseModel):
    queues: list[str] = []

    def owned_queues(self) -> frozenset[str]:
        return frozenset(self.queues)


@pytest.fixture
def recording() -> Iterator[list[Recording]]:
    """`recording` registered for the test (the executors it made), then unregistered."""
    made: list[Recording] = []

    def factory(context: ExecutorContext, own: RecordingSettings) -> Recording:
        made.append(Recording())
        return made[-1]

    def placement(environ: dict[str, str]) -> NodePlacement:
        return NodePlacement(int(environ["REC_NODE"]), f"rec:{environ['REC_NODE']}")

    register(
        "recording",
        factory,
        RecordingSettings,
        secret_env=Recording.secret_env,
        placement=placement,
    )
    try:
        yield made
    finally:
        del registry.REGISTRY["recording"]


def test_the_default_executor_alone_when_no_other_owns_a_queue() -> None:
    none = {"slurm": SlurmSettings(queues={})}
    # The workers' queues are the dispatcher's on every install.
    assert isinstance(make_executor(Settings(), REDIS, ENGINE, none), DispatchExecutor)
    routing = make_executor(
        Settings(), REDIS, ENGINE, {"slurm": SlurmSettings(queues={"hpc": QUEUE})}
    )
    assert isinstance(routing, RoutingExecutor)
    assert isinstance(routing.for_job(job("hpc")), SlurmExecutor)
    assert isinstance(routing.for_job(job("default")), DispatchExecutor)


def test_the_executors_settings_are_read_from_their_own_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAUNCHBAY_SLURM_QUEUES", '{"hpc": {"partition": "gpu"}}')
    routing = make_executor(Settings(), REDIS, ENGINE)
    assert isinstance(routing, RoutingExecutor)
    assert routing.for_job(job("hpc")).name == "slurm"
    assert routed_queues() == {"hpc"}
    monkeypatch.delenv("LAUNCHBAY_SLURM_QUEUES")
    assert routed_queues() == frozenset()


def test_a_registered_executor_runs_the_queues_it_owns(recording: list[Recording]) -> None:
    given = {"recording": RecordingSettings(queues=["mine", "ours"])}
    routing = make_executor(Settings(), REDIS, ENGINE, given)
    assert isinstance(routing, RoutingExecutor)
    [rec] = recording
    routing.submit(job("mine"))
    routing.cancel(job("ours"))
    assert routing.describe([job("mine"), job("ours")]) == {"a" * 32: [TaskStatus("rec", True)]}
    assert rec.calls == [
        ("submit", "mine"),
        ("cancel", "ours"),
        ("describe", "mine"),
        ("describe", "ours"),
    ]
    assert routing.dry_run(job("mine")) == DryRunPlan(
        "recording", rec.plan(job("mine")), "the text"
    )
    assert routing.dry_run(job("default")).executor == "rq"
    assert routed_queues(given) == {"mine", "ours"}
    assert parts_of(routing) == [(routing.default, None), (rec, frozenset({"mine", "ours"}))]
    assert "RECORDING_KEY" in routing.secret_env and "RECORDING_KEY" in secret_env()
    assert placement_for("recording", {"REC_NODE": "2"}) == NodePlacement(2, "rec:2")
    assert placement_for("rq", {}) is None
    with pytest.raises(KeyError):
        placement_for("nobody", {})


def test_routing_sends_slurm_queues_to_slurm_and_the_rest_to_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    submitted: list[str] = []
    monkeypatch.setattr(commands, "sbatch", lambda script: submitted.append(script) or "1")
    cancelled: list[str] = []
    monkeypatch.setattr(commands, "scancel", cancelled.append)
    rq = Recording()
    slurm = SlurmExecutor({"hpc": QUEUE}, data_dir=tmp_path / "data", grace_s=1)
    routing = RoutingExecutor(rq, {"hpc": slurm})

    routing.submit(job("default"))
    routing.submit(job("hpc"))
    routing.cancel(job("hpc"))
    routing.cancel(job("default"))
    assert rq.calls == [("submit", "default"), ("cancel", "default")]
    assert len(submitted) == 1 and "--partition=gpu" in submitted[0]
    assert cancelled == [slurm_job_name("a" * 32, 1)]
    assert routing.plan(job("hpc"))[0].task_id == slurm_job_name("a" * 32, 1)
    assert routing.dry_run(job("hpc")).script == slurm.sbatch_plan(job("hpc")).script
    assert routing.dry_run(job("default")).script == "the text"
    assert routing.reports_ends and not rq.reports_ends
    assert parts_of(rq) == [(rq, None)]


def test_every_backend_s_credentials_are_kept_from_the_ranks() -> None:
    assert {"LAUNCHBAY_REDIS_URL", "REDIS_URL", "REDIS_*", "RQ_*"} <= secret_env()


def test_an_rq_task_keeps_the_call_earlier_versions_stored() -> None:
    """`run_job(id, attempt)` and `run_job(id, attempt, node)`, positionally, as queued by any
    version; read back in one place."""
    single, second = TaskPlan("t", "j", 2, None), TaskPlan("t", "j", 2, 1)
    assert (run_job_args(single), run_job_args(second)) == (("j", 2), ("j", 2, 1))
    assert attempt_of_call(("j", 2)) == AttemptRef("j", 2, None)
    assert attempt_of_call(("j", 2, 1)) == AttemptRef("j", 2, 1)
    assert attempt_of_call(("j", 2, None)) == AttemptRef("j", 2, None)
    assert attempt_of_call(("j",)) is None
    nodes = attempt_tasks(
        job("default").model_copy(update={"spec": {**job("x").spec, "nnodes": 2}})
    )
    assert [(t.task_id, t.node) for t in nodes] == [
        ("a" * 32 + "-1-node0", 0),
        ("a" * 32 + "-1-node1", 1),
    ]
