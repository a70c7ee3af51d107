"""build_launch: the command, environment and directory of an attempt, without launching."""

import json
from pathlib import Path
from typing import Any

import pytest

from jobs.spec import JobSpec
from worker.launch import RANK_ENTRY, LaunchPlan, Rendezvous, RunPaths, build_launch

DATA = Path("/data")
PATHS = RunPaths.for_attempt(DATA, "job1", 3)
PY = "/venv/bin/python"
CODE_ID = "ab" * 32


def spec(**fields: Any) -> JobSpec:
    base: dict[str, Any] = {"name": "t"}
    if "code" not in fields:
        base["recipe"] = "synthetic"
    return JobSpec(**{**base, **fields})


def plan(
    job_spec: JobSpec,
    *,
    cuda: bool = False,
    resume: Path | None = None,
    base_env: dict[str, str] | None = None,
    paths: RunPaths = PATHS,
    rendezvous: Rendezvous | None = None,
    gpus: tuple[str, ...] = (),
) -> LaunchPlan:
    return build_launch(
        job_spec,
        job_id="job1",
        attempt=3,
        paths=paths,
        resume_from=resume,
        cuda_available=cuda,
        port=29999,
        python=PY,
        base_env=base_env or {},
        recipe_module="jobs.recipes.synthetic" if job_spec.recipe else None,
        rendezvous=rendezvous,
        gpus=gpus,
    )


def test_paths_of_an_attempt() -> None:
    assert PATHS.run_dir == DATA / "runs/job1/attempt-3"
    assert PATHS.events_file == DATA / "runs/job1/attempt-3/events.jsonl"
    # The ranks write checkpoints in the attempt's directory; Launchbay keeps its own copies.
    assert PATHS.checkpoint_dir == DATA / "runs/job1/attempt-3/checkpoints"
    assert PATHS.kept_dir == DATA / "checkpoints/job1"
    assert PATHS.log_dir == DATA / "runs/job1/attempt-3/logs"
    assert PATHS.rank_log(1) == DATA / "runs/job1/attempt-3/logs/rank-1.log"
    assert PATHS.work_dir == DATA / "runs/job1/attempt-3/work"


def test_torchrun_recipe() -> None:
    result = plan(spec(nproc_per_node=4, max_restarts=2, args=["--x", "1"]))
    assert result.argv == [
        PY,
        "-I",
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc-per-node=4",
        "--max-restarts=2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=127.0.0.1:29999",
        "--rdzv-id=job1-3",
        "--local-addr=127.0.0.1",
        f"--log-dir={PATHS.log_dir / 'torchelastic'}",
        "--no-python",
        PY,
        "-I",
        "-u",
        str(RANK_ENTRY),
        "--log-dir",
        str(PATHS.log_dir),
        "--module",
        "jobs.recipes.synthetic",
        "--x",
        "1",
    ]
    assert result.cwd == PATHS.work_dir  # a recipe writes where a program of its own would
    assert (result.launcher, result.expected_ranks) == ("torchrun", 4)
    assert "MASTER_PORT" not in result.env  # torchrun's to set


def test_torchrun_code_entrypoint() -> None:
    code = {"code_id": CODE_ID, "entrypoint": "src/train.py"}
    result = plan(spec(code=code, args=["a"]))
    tail = result.argv[result.argv.index(str(RANK_ENTRY)) :]
    assert tail == [
        str(RANK_ENTRY),
        "--log-dir",
        str(PATHS.log_dir),
        "--script",
        str(PATHS.work_dir / "src/train.py"),
        "a",
    ]
    assert result.cwd == PATHS.work_dir


def test_pass_local_rank_arg() -> None:
    result = plan(spec(code={"code_id": CODE_ID}, pass_local_rank_arg=True, args=["a"]))
    tail = result.argv[result.argv.index(str(RANK_ENTRY)) + 3 :]
    assert tail == ["--local-rank-arg=auto", "--script", str(PATHS.work_dir / "train.py"), "a"]
    for spelling in ("underscore", "dash"):
        result = plan(spec(code={"code_id": CODE_ID}, pass_local_rank_arg=spelling))
        assert f"--local-rank-arg={spelling}" in result.argv


def test_python_launcher() -> None:
    code = {"code_id": CODE_ID, "entrypoint": "main.py"}
    result = plan(spec(code=code, launcher="python", nproc_per_node=3, args=["b"]))
    assert result.argv == [
        PY,
        "-I",
        "-u",
        str(RANK_ENTRY),
        "--log-dir",
        str(PATHS.log_dir),
        "--children",
        "--script",
        str(PATHS.work_dir / "main.py"),
        "b",
    ]
    assert (result.launcher, result.expected_ranks) == ("python", 1)
    env = result.env
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"]) == (
        "127.0.0.1",
        "29999",
        "3",
    )


def test_launchbay_environment() -> None:
    job_spec = spec(config={"epochs": 2}, amp="bf16", checkpoint={"keep_last": 5})
    env = plan(job_spec).env
    assert env["LAUNCHBAY_JOB_ID"] == "job1"
    assert env["LAUNCHBAY_ATTEMPT"] == "3"
    assert env["LAUNCHBAY_EVENTS_FILE"] == str(PATHS.events_file)
    assert env["LAUNCHBAY_CHECKPOINT_DIR"] == str(PATHS.checkpoint_dir)
    assert json.loads(env["LAUNCHBAY_CONFIG"]) == job_spec.config
    assert json.loads(env["LAUNCHBAY_CONFIG"])["epochs"] == 2
    assert env["LAUNCHBAY_AMP"] == "bf16"
    assert json.loads(env["LAUNCHBAY_CHECKPOINT"])["keep_last"] == 5
    assert env["PYTHONUNBUFFERED"] == "1"
    assert "LAUNCHBAY_RESUME_FROM" not in env


def test_resume_path_only_when_there_is_one() -> None:
    resume = DATA / "checkpoints/job1/step-10.pt"
    assert plan(spec(), resume=resume).env["LAUNCHBAY_RESUME_FROM"] == str(resume)
    stale = {"LAUNCHBAY_RESUME_FROM": "/old.pt"}
    assert "LAUNCHBAY_RESUME_FROM" not in plan(spec(), base_env=stale).env


@pytest.mark.parametrize(
    ("fields", "cuda", "device", "backend", "omp"),
    [
        ({}, False, "cpu", "gloo", "1"),
        ({}, True, "cuda", "nccl", None),
        ({"device": "cpu"}, True, "cpu", "gloo", "1"),
        ({"backend": "gloo"}, True, "cuda", "gloo", None),
        ({"device": "cuda"}, True, "cuda", "nccl", None),
    ],
)
def test_device_and_backend_resolution(
    fields: dict[str, str], cuda: bool, device: str, backend: str, omp: str | None
) -> None:
    env = plan(spec(**fields), cuda=cuda).env
    assert (env["LAUNCHBAY_DEVICE"], env["LAUNCHBAY_BACKEND"]) == (device, backend)
    assert env.get("OMP_NUM_THREADS") == omp


def test_environment_precedence() -> None:
    base = {
        "PATH": "/bin",
        "FOO": "worker",
        "OMP_NUM_THREADS": "8",
        "LAUNCHBAY_TEST_SESSION": "marker",
        "LAUNCHBAY_DATABASE_URL": "postgresql://u:secret@db/x",
        "LAUNCHBAY_ADMIN_TOKEN": "secret",
        "AWS_SECRET_ACCESS_KEY": "the store's",
        "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/token",
        "RANK": "5",
        "MASTER_PORT": "1",
        "TORCHELASTIC_RUN_ID": "old",
    }
    user = {"FOO": "user", "BAR": "1", "LAUNCHBAY_JOB_ID": "hijack", "PYTHONUNBUFFERED": "0"}
    env = plan(spec(env=user), base_env=base).env
    assert (env["PATH"], env["FOO"], env["BAR"]) == ("/bin", "user", "1")
    assert env["LAUNCHBAY_JOB_ID"] == "job1" and env["PYTHONUNBUFFERED"] == "1"
    assert env["OMP_NUM_THREADS"] == "1"  # CPU: one thread per rank unless the spec says
    # The worker's own FOO and marker are not on the allow-list (worker.passed_env).
    assert "FOO" not in plan(spec(), base_env=base).env
    for hidden in ("LAUNCHBAY_TEST_SESSION", "LAUNCHBAY_DATABASE_URL", "LAUNCHBAY_ADMIN_TOKEN"):
        assert hidden not in env
    for hidden in ("RANK", "MASTER_PORT"):
        assert hidden not in env
    assert not [name for name in env if name.startswith("AWS_")]  # the store's identity
    assert "TORCHELASTIC_RUN_ID" not in env
    assert plan(spec(env={"OMP_NUM_THREADS": "4"}), base_env=base).env["OMP_NUM_THREADS"] == "4"


def test_recipe_needs_its_module() -> None:
    with pytest.raises(ValueError, match="needs its module"):
        build_launch(
            spec(),
            job_id="j",
            attempt=1,
            paths=PATHS,
            resume_from=None,
            cuda_available=False,
            port=1,
            python=PY,
            base_env={},
        )


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, "1800"),  # no hang_timeout_s: the worker's default
        ({"hang_timeout_s": 600.5}, "601"),  # the hang watchdog's timeout, rounded up
        ({"hang_timeout_s": 3}, "30"),  # never shorter than a slow process-group set-up
        ({"hang_timeout_s": 5, "env": {"LAUNCHBAY_COLLECTIVE_TIMEOUT_S": "7"}}, "7"),
    ],
)
def test_collective_timeout_from_the_spec(fields: dict[str, Any], expected: str) -> None:
    base = {"LAUNCHBAY_COLLECTIVE_TIMEOUT_S": "99"}  # the worker's own: never inherited
    env = plan(spec(**fields), base_env=base).env
    assert env["LAUNCHBAY_COLLECTIVE_TIMEOUT_S"] == expected


def test_collective_timeout_default_is_a_setting() -> None:
    job_spec = spec()
    env = build_launch(
        job_spec,
        job_id="j",
        attempt=1,
        paths=PATHS,
        resume_from=None,
        cuda_available=False,
        port=1,
        python=PY,
        base_env={},
        recipe_module="jobs.recipes.synthetic",
        default_collective_timeout_s=120,
    ).env
    assert env["LAUNCHBAY_COLLECTIVE_TIMEOUT_S"] == "120"


def test_torchrun_ranks_get_a_fresh_store_per_elastic_restart_where_there_are_restarts() -> None:
    assert plan(spec(max_restarts=2)).env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    # Without restarts, torchrun's own store, as bare torchrun's ranks use it (a fresh one
    # costs each rank 0.2-0.6 s in init_process_group).
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in plan(spec()).env
    code = {"code_id": CODE_ID, "entrypoint": "main.py"}
    python = spec(code=code, launcher="python", max_restarts=2)
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in plan(python).env


def test_a_node_of_a_multi_node_job_meets_the_others_at_the_published_endpoint() -> None:
    paths = RunPaths.for_attempt(DATA, "job1", 3, node=1)
    assert paths.run_dir == DATA / "runs/job1/attempt-3/node-1"
    assert paths.checkpoint_dir == PATHS.checkpoint_dir, "every node shares the checkpoint dir"
    assert paths.work_dir == DATA / "runs/job1/attempt-3/node-1/work", "each its own copy"
    rendezvous = Rendezvous(
        endpoint="node-a:29400", is_host=False, local_addr="node-b", timeout_s=59.5, node=1
    )
    result = plan(
        spec(nnodes=2, nproc_per_node=4),
        base_env={"LAUNCHBAY_NODE": "7"},
        paths=paths,
        rendezvous=rendezvous,
    )
    assert result.argv[4:13] == [
        "--nnodes=2",
        "--nproc-per-node=4",
        "--max-restarts=0",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=node-a:29400",
        "--rdzv-id=job1-3",
        "--rdzv-conf=is_host=0,join_timeout=120",
        "--local-addr=node-b",
        f"--log-dir={paths.log_dir / 'torchelastic'}",
    ]
    assert result.expected_ranks == 4, "the ranks of this node"
    assert result.env["LAUNCHBAY_NODE"] == "1"
    assert result.env["LAUNCHBAY_EVENTS_FILE"] == str(paths.events_file)
    host = plan(spec(nnodes=2), rendezvous=Rendezvous("node-a:29400", True, "node-a", 30, 0))
    assert "--rdzv-conf=is_host=1,join_timeout=90" in host.argv


def test_a_single_node_job_names_no_node() -> None:
    assert "LAUNCHBAY_NODE" not in plan(spec(), base_env={"LAUNCHBAY_NODE": "1"}).env


GPU_ENV = {
    "CUDA_VISIBLE_DEVICES": "GPU-of-another-worker",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "CUDA_DEVICE_ORDER": "FASTEST_FIRST",
    "HIP_VISIBLE_DEVICES": "0,1,2,3",
    "ROCR_VISIBLE_DEVICES": "0,1,2,3",
}


@pytest.mark.parametrize("launcher", ["torchrun", "python"])
def test_a_job_sees_the_first_nproc_per_node_of_its_workers_gpus_whatever_its_env(
    launcher: str,
) -> None:
    """The API refuses these variables in a spec; a spec stored before that, or a policy
    that allows them, still cannot give a job GPUs its worker does not own."""
    job_spec = spec(nproc_per_node=2, launcher=launcher, env={**GPU_ENV, "FOO": "1"})
    base = {"CUDA_VISIBLE_DEVICES": "4,5,6", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    env = plan(job_spec, cuda=True, base_env=base, gpus=("4", "5", "6")).env
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["FOO"] == "1"
    for name in ("NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        assert name not in env


def test_a_cpu_worker_passes_its_own_visible_devices_on() -> None:
    env = plan(spec(env=GPU_ENV), base_env={"CUDA_VISIBLE_DEVICES": ""}).env
    assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"]) == ("", "PCI_BUS_ID")
    assert "CUDA_VISIBLE_DEVICES" not in plan(spec(env=GPU_ENV)).env


def test_ranks_know_where_their_error_record_goes() -> None:
    assert plan(spec()).env["LAUNCHBAY_LOG_DIR"] == str(PATHS.log_dir)


def test_ranks_know_where_their_artifacts_go() -> None:
    output = plan(spec()).env["LAUNCHBAY_OUTPUT_DIR"]
    assert output == str(PATHS.data_dir / "artifacts" / "job1")


def test_frameworks_are_told_to_run_torchrun_ranks_as_one_group() -> None:
    """accelerate (and the Trainer on it) forms no group on CPU without ACCELERATE_USE_CPU,
    and Lightning's `devices="auto"` is one CPU device: each rank would train alone."""
    on_cpu = plan(spec(nproc_per_node=2, nnodes=1)).env
    assert on_cpu["ACCELERATE_USE_CPU"] == "1"
    assert (on_cpu["PL_TRAINER_DEVICES"], on_cpu["PL_TRAINER_NUM_NODES"]) == ("2", "1")
    assert on_cpu["PL_TRAINER_ACCELERATOR"] == "cpu"
    on_gpu = plan(spec(nproc_per_node=2), cuda=True, gpus=("0", "1")).env
    assert "ACCELERATE_USE_CPU" not in on_gpu and "PL_TRAINER_ACCELERATOR" not in on_gpu
    assert on_gpu["PL_TRAINER_DEVICES"] == "2"
    # The job's env wins; the python launcher's program starts its own processes.
    mine = plan(spec(env={"ACCELERATE_USE_CPU": "0", "PL_TRAINER_DEVICES": "1"})).env
    assert (mine["ACCELERATE_USE_CPU"], mine["PL_TRAINER_DEVICES"]) == ("0", "1")
    python = plan(spec(launcher="python", nproc_per_node=2)).env
    assert not {k for k in python if k.startswith(("PL_TRAINER_", "ACCELERATE_"))}
    assert plan(spec(launcher="python")).cuda_available is False
    assert plan(spec(), cuda=True, gpus=("0", "1")).cuda_available is True
