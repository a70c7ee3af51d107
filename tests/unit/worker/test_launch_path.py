"""Which path an attempt's ranks start by, and what a warm launcher sets for each rank against
what torchrun sets (dumped from torchrun here: tests/integration/worker/test_warm_start.py
compares whole ranks)."""

from pathlib import Path

import pytest

from jobs.spec import JobSpec
from worker import warm_launcher
from worker.launch import LaunchPlan
from worker.launch_path import choose_launch_path, shadowed
from worker.passed_env import passed_env
from worker.warm_pool import read_at_import, server_env, server_key
from worker.warm_start import default_rank_env, effective_rank_env, program_dir

# What torchrun 2.13 sets for a rank of a single-node job (store not shared), read from
# os.environ under `torchrun --nproc-per-node=2`.
TORCHRUN_SETS = {
    "GROUP_RANK", "GROUP_WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "OMP_NUM_THREADS", "RANK", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE",
    "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "WORLD_SIZE",
}  # fmt: skip


def choose(**spec: object) -> tuple[str, str | None]:
    given = "launcher" in spec
    choice = choose_launch_path(
        JobSpec(name="j", recipe="synthetic", **spec),  # type: ignore[arg-type]
        launcher_given=given,
        enabled=True,
        has_pool=True,
    )
    return choice.path, choice.reason


def test_warm_by_default_cold_when_the_spec_or_the_worker_says_so() -> None:
    assert choose() == ("warm", None)
    assert choose(launcher="torchrun")[0] == "cold"
    assert "launcher: python" in str(choose(launcher="python")[1])
    assert "multi-node" in str(choose(nnodes=2)[1])
    assert "OMP_NUM_THREADS" in str(choose(env={"OMP_NUM_THREADS": "4"})[1])
    assert choose(env={"TORCH_EXTENSIONS_DIR": "/x", "FOO": "1"}) == ("warm", None)
    spec = JobSpec(name="j", recipe="synthetic")
    off = choose_launch_path(spec, launcher_given=False, enabled=False, has_pool=True)
    assert "LAUNCHBAY_WARM_START" in str(off.reason)
    none = choose_launch_path(spec, launcher_given=False, enabled=True, has_pool=False)
    assert none.path == "cold"


def test_a_program_s_own_module_of_a_preloaded_name_goes_cold(tmp_path: Path) -> None:
    (tmp_path / "numpy.py").write_text("")
    (tmp_path / "torch").mkdir()
    (tmp_path / "train.py").write_text("")
    assert shadowed(tmp_path, {"numpy", "torch", "json"}) == ["numpy", "torch"]


def test_a_warm_rank_gets_what_torchrun_sets() -> None:
    request = {"nproc": 2, "max_restarts": 1, "run_id": "j-1", "torchelastic_dir": "/l/te"}
    env = warm_launcher.rank_env({"PATH": "/bin"}, request, 1, 0, 4242)
    assert set(env) - {"PATH"} == TORCHRUN_SETS
    assert env["RANK"] == env["LOCAL_RANK"] == env["ROLE_RANK"] == "1"
    assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "2"
    assert env["TORCHELASTIC_USE_AGENT_STORE"] == "False"
    assert env["TORCHELASTIC_ERROR_FILE"] == "/l/te/j-1_warm/attempt_0/1/error.json"
    single = warm_launcher.rank_env({}, {**request, "nproc": 1}, 0, 0, 1)
    assert "OMP_NUM_THREADS" not in single  # torchrun sets it for several ranks only


@pytest.mark.parametrize(
    ("env", "coerced"),
    [({}, "C.UTF-8"), ({"LANG": "C"}, "C.UTF-8"), ({"LANG": "en_US.UTF-8"}, None)],
)
def test_the_worker_keys_its_servers_as_the_launcher_sets_the_ranks(
    env: dict[str, str], coerced: str | None
) -> None:
    plan = LaunchPlan([], env, Path("/w"), 2)
    effective = effective_rank_env(plan)
    assert effective == warm_launcher.locale_coerced({**env, "OMP_NUM_THREADS": "1"})
    assert effective.get("LC_CTYPE") == coerced


def test_a_server_s_environment_holds_no_secret_and_nothing_run_time() -> None:
    worker = {
        "PATH": "/bin",
        "LAUNCHBAY_DATABASE_URL": "postgresql://u:pw@db/x",
        "AWS_SECRET_ACCESS_KEY": "s",
        "HTTPS_PROXY": "http://u:pw@proxy",
        "LD_LIBRARY_PATH": "/cuda",
        "OMP_NUM_THREADS": "1",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "LAUNCHBAY_JOB_ID": "j",
    }
    env = server_env(passed_env(worker))
    assert env == {"PATH": "/bin", "LD_LIBRARY_PATH": "/cuda", "OMP_NUM_THREADS": "1"}
    assert not read_at_import("TORCHELASTIC_RUN_ID") and read_at_import("TORCH_LOGS")
    assert server_key("/py", worker) == server_key("/py", {**worker, "LAUNCHBAY_JOB_ID": "k"})
    assert server_key("/py", worker) != server_key("/py", {**worker, "OMP_NUM_THREADS": "2"})


def test_the_program_s_directory_is_its_script_s() -> None:
    entry = ("py", "-I", "-u", "rank_main.py", "--log-dir", "/l", "--script", "/w/src/t.py")
    assert program_dir(LaunchPlan([], {}, Path("/w"), 2, entry=entry)) == Path("/w/src")
    module = ("py", "-I", "-u", "rank_main.py", "--log-dir", "/l", "--module", "m")
    assert program_dir(LaunchPlan([], {}, Path("/w"), 2, entry=module)) == Path("/w")


def test_the_worker_s_own_server_is_keyed_as_a_default_job_s_ranks(tmp_path: Path) -> None:
    env = default_rank_env(tmp_path, False, [])
    assert env["OMP_NUM_THREADS"] == "1"  # a CPU job's, set by Launchbay
    assert "LAUNCHBAY_JOB_ID" in env and "FOO" not in env
