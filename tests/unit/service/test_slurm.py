"""The Slurm executor's pure parts: the queue settings, the sbatch script, the state mapping,
the parsing of squeue/sacct output, its dry run and its placement of a node. (The routing of
jobs between executors: test_executors.py.)"""

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from pydantic import ValidationError

from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState
from service.executors.base import TaskStatus
from service.executors.slurm import commands
from service.executors.slurm.allocation import slurm_placement
from service.executors.slurm.executor import SlurmExecutor
from service.executors.slurm.queues import SlurmQueue, SlurmSettings
from service.executors.slurm.script import build_sbatch_script, slurm_job_name
from service.executors.slurm.states import slurm_end
from service.models import Job
from tests.support.slurm_names import parse_slurm_job_name

QUEUE = SlurmQueue(partition="gpu", account="ml-lab", time_limit="04:00:00")


def spec(**fields: object) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "recipe": "synthetic", **fields})


def job(queue: str = "hpc", attempt: int = 1, **fields: object) -> Job:
    body = spec(queue=queue, **fields)
    return Job(
        id="a" * 32,
        name="j",
        state=JobState.QUEUED,
        spec=body.model_dump(mode="json"),
        queue=queue,
        attempt=attempt,
    )


def script_of(s: JobSpec, queue: SlurmQueue = QUEUE) -> str:
    return build_sbatch_script(
        "a" * 32, 2, s, queue, data_dir=Path("/data"), grace_s=10, python="/venv/bin/python"
    ).script


def test_the_script_asks_for_one_task_per_node_with_nproc_cpus_each() -> None:
    script = script_of(spec(nnodes=3, nproc_per_node=4))
    options = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert options == [
        f"#SBATCH --job-name=launchbay-{'a' * 32}-2",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=ml-lab",
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --time=04:00:00",
        f"#SBATCH --output=/data/runs/{'a' * 32}/slurm-2.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --no-requeue",
        "#SBATCH --export=ALL",
    ]
    assert script.startswith("#!/bin/bash\n")
    assert "exec srun --nodes=3 --ntasks-per-node=1" in script
    assert f"/venv/bin/python -m worker.slurm_node {'a' * 32} 2" in script


def test_gpus_are_asked_for_cuda_jobs_and_on_gpu_queues() -> None:
    assert "--gpus-per-node=2" in script_of(spec(device="cuda"))
    assert "--gpus-per-node" not in script_of(spec(device="auto"))
    gpu_queue = SlurmQueue(partition="gpu", gpus=True)
    assert "--gpus-per-node=2" in script_of(spec(device="auto"), gpu_queue)
    assert "--gpus-per-node" not in script_of(spec(device="cpu"), gpu_queue)


def test_the_memory_limit_is_asked_for_per_node() -> None:
    assert "#SBATCH --mem=1536M\n" in script_of(spec(memory_limit_bytes=1536 * 2**20))
    assert "--mem" not in script_of(spec())


def test_the_time_limit_leaves_the_supervisor_room_to_record_its_own_timeout() -> None:
    # 600 s + 10 s grace + 120 s margin = 730 s: 13 whole minutes.
    assert "#SBATCH --time=13\n" in script_of(spec(timeout_s=600))
    no_default = SlurmQueue(partition="gpu")
    assert "--time" not in script_of(spec(), no_default)


def test_nothing_of_the_spec_but_numbers_reaches_the_script() -> None:
    hostile = spec(
        name="x $(reboot) --uid=0",
        env={"EVIL": "$(rm -rf /)"},
        args=["; rm -rf /"],
        tags={"a": "`id`"},
    )
    script = script_of(hostile)
    for needle in ("reboot", "rm -rf", "`id`", "--uid", "EVIL"):
        assert needle not in script


@pytest.mark.parametrize(
    "field, value",
    [
        ("partition", "gpu\n#SBATCH --uid=0"),
        ("partition", "gpu --uid=0"),
        ("partition", ""),
        ("account", "$(id)"),
        ("qos", "a;b"),
        ("time_limit", "4 hours"),
        ("time_limit", "1:2:3:4"),
        ("python", "python3"),
        ("python", "/venv/bin/python; reboot"),
    ],
)
def test_queue_settings_that_could_change_the_script_are_refused(field: str, value: str) -> None:
    with pytest.raises(ValidationError):
        SlurmQueue.model_validate({"partition": "gpu", field: value})


def test_unknown_queue_settings_are_refused() -> None:
    with pytest.raises(ValidationError):
        SlurmQueue.model_validate({"partition": "gpu", "nodes": 4})


def test_the_setting_is_json_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    queues = {"hpc": {"partition": "gpu", "account": "ml", "time_limit": "1-00:00:00"}}
    monkeypatch.setenv("LAUNCHBAY_SLURM_QUEUES", json.dumps(queues))
    settings = SlurmSettings()
    assert settings.queues == {"hpc": SlurmQueue(**queues["hpc"])}
    assert settings.owned_queues() == {"hpc"}
    monkeypatch.setenv("LAUNCHBAY_SLURM_QUEUES", json.dumps({"bad queue": {"partition": "x"}}))
    with pytest.raises(ValidationError):
        SlurmSettings()
    monkeypatch.setenv("LAUNCHBAY_SLURM_QUEUES", "not json")
    with pytest.raises(Exception):  # noqa: B017 - pydantic-settings' own error type
        SlurmSettings()


def test_job_names_round_trip() -> None:
    assert parse_slurm_job_name(slurm_job_name("abc", 3)) == ("abc", 3)
    assert parse_slurm_job_name("someone-else") is None
    assert parse_slurm_job_name("launchbay-abc-x") is None


@pytest.mark.parametrize(
    "state, launchbay, reason",
    [
        ("TIMEOUT", JobState.FAILED, ExitReason.TIMEOUT),
        ("DEADLINE", JobState.FAILED, ExitReason.TIMEOUT),
        ("OUT_OF_MEMORY", JobState.FAILED, ExitReason.OOM),
        ("NODE_FAIL", JobState.FAILED, ExitReason.WORKER_LOST),
        ("BOOT_FAIL", JobState.FAILED, ExitReason.WORKER_LOST),
        ("PREEMPTED", JobState.FAILED, ExitReason.PREEMPTED),
        ("CANCELLED", JobState.CANCELLED, ExitReason.CANCELLED),
        ("CANCELLED by 1000", JobState.CANCELLED, ExitReason.CANCELLED),
        ("COMPLETED", JobState.FAILED, ExitReason.WORKER_LOST),
        ("FAILED", JobState.FAILED, ExitReason.WORKER_LOST),
    ],
)
def test_ended_slurm_states_map_to_launchbay_ends(
    state: str, launchbay: JobState, reason: ExitReason
) -> None:
    end = slurm_end(state, "42", "TimeLimit")
    assert end is not None
    assert (end.state, end.exit_reason) == (launchbay, reason)
    assert "Slurm job 42" in end.message


@pytest.mark.parametrize("state", ["PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"])
def test_live_slurm_states_end_nothing(state: str) -> None:
    assert slurm_end(state, "42") is None


def test_squeue_and_sacct_lines_are_parsed_and_junk_skipped() -> None:
    text = "12|launchbay-a-1|PENDING|Priority\n\ngarbage\n13|launchbay-b-1|RUNNING|None\n|x|y\n"
    assert commands.parse_job_lines(text) == [
        commands.SlurmJob("12", "launchbay-a-1", "PENDING", "Priority"),
        commands.SlurmJob("13", "launchbay-b-1", "RUNNING", "None"),
    ]


def test_slurm_clients_get_no_allocation_variables_and_jobs_no_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SBATCH_PARTITION", "other")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    monkeypatch.setenv("LAUNCHBAY_ADMIN_TOKEN", "lb_secret")
    monkeypatch.setenv("LAUNCHBAY_DATABASE_URL", "postgresql://db/launchbay")
    env = commands.submit_env()
    assert "SLURM_JOB_ID" not in env and "SBATCH_PARTITION" not in env
    assert env["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    # The job's environment carries what its supervisor needs, and no token of the service.
    assert "LAUNCHBAY_ADMIN_TOKEN" not in env
    assert env["LAUNCHBAY_DATABASE_URL"] == "postgresql://db/launchbay"


def test_describe_reads_squeue_then_sacct_and_takes_the_newest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = [job("hpc"), job("hpc", attempt=2), job("hpc", attempt=3)]
    names = [slurm_job_name(j.id, j.attempt) for j in jobs]

    def squeue(asked: Sequence[str]) -> list[commands.SlurmJob]:
        return [
            commands.SlurmJob("5", names[0], "NODE_FAIL", None),
            commands.SlurmJob("9", names[0], "PENDING", "Resources"),
        ]

    def sacct(asked: Sequence[str]) -> list[commands.SlurmJob]:
        assert set(asked) <= set(names[1:])
        return [commands.SlurmJob("3", names[1], "TIMEOUT", "TimeLimit")]

    monkeypatch.setattr(commands, "squeue", squeue)
    monkeypatch.setattr(commands, "sacct", sacct)
    executor = SlurmExecutor({"hpc": QUEUE}, data_dir=Path("/data"), grace_s=10)
    # Described by job id: the three attempts share one id, so only the last remains.
    described = executor.describe(jobs[:1])
    [status] = described[jobs[0].id]
    assert status == TaskStatus(names[0], live=True, ended=None, pending_reason="Slurm: Resources")
    [timed_out] = executor.describe(jobs[1:2])[jobs[1].id]
    assert not timed_out.live and timed_out.ended is not None
    assert timed_out.ended.exit_reason is ExitReason.TIMEOUT
    [unknown] = executor.describe(jobs[2:])[jobs[2].id]
    assert unknown == TaskStatus(names[2], live=False)


def test_a_pending_allocation_not_yet_scheduled_gives_no_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """squeue says `None` until Slurm's scheduler has looked at a new allocation: the job
    shows no pending reason then, not "Slurm: None"."""
    [queued] = [job("hpc")]
    name = slurm_job_name(queued.id, queued.attempt)
    answer = [commands.SlurmJob("7", name, "PENDING", "None")]
    monkeypatch.setattr(commands, "squeue", lambda asked: answer)
    executor = SlurmExecutor({"hpc": QUEUE}, data_dir=Path("/data"), grace_s=10)
    assert executor.describe([queued])[queued.id] == [TaskStatus(name, live=True)]
    answer[0] = commands.SlurmJob("7", name, "PENDING", "Priority")
    [status] = executor.describe([queued])[queued.id]
    assert status.pending_reason == "Slurm: Priority"


def test_the_dry_run_is_the_script_sbatch_would_get() -> None:
    executor = SlurmExecutor({"hpc": QUEUE}, data_dir=Path("/data"), grace_s=10)
    plan = executor.dry_run(job("hpc", nnodes=2))
    assert (plan.executor, [t.task_id for t in plan.tasks]) == (
        "slurm",
        [slurm_job_name("a" * 32, 1)],
    )
    assert plan.script == executor.sbatch_plan(job("hpc", nnodes=2)).script
    assert plan.script is not None and "--nodes=2" in plan.script


def test_a_node_of_an_allocation_is_placed_by_what_slurm_says() -> None:
    single = slurm_placement({"SLURM_JOB_ID": "12", "SLURMD_NODENAME": "n1", "SLURM_NNODES": "1"})
    assert (single.node, single.worker_name) == (None, "slurm-12:n1")
    second = slurm_placement(
        {
            "SLURM_JOB_ID": "12",
            "SLURMD_NODENAME": "n2",
            "SLURM_JOB_NUM_NODES": "2",
            "SLURM_NODEID": "1",
        }
    )
    assert (second.node, second.worker_name) == (1, "slurm-12:n2")
