"""The command after `launchbay run --`, read as spec fields, and the spec built from it."""

from typing import Any

import pytest

from client.errors import CommandError
from client.program import (
    Program,
    RunOptions,
    default_name,
    entrypoint_in,
    parse_command,
    run_spec,
)

TORCHRUN = {"launcher": "torchrun"}


@pytest.mark.parametrize(
    ("command", "entrypoint", "args", "fields"),
    [
        (["python", "train.py", "--epochs", "1"], "train.py", ["--epochs", "1"], {}),
        (["train.py", "--lr", "0.1"], "train.py", ["--lr", "0.1"], {}),
        (["python3.11", "-u", "-W", "ignore", "src/train.py"], "src/train.py", [], {}),
        (["/usr/bin/python3", "train.py", "--queue", "x"], "train.py", ["--queue", "x"], {}),
        (
            ["torchrun", "--nproc-per-node", "2", "train.py", "--nproc-per-node", "9"],
            "train.py",
            ["--nproc-per-node", "9"],
            {**TORCHRUN, "nproc_per_node": 2},
        ),
        (
            ["torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=4", "t.py"],
            "t.py",
            [],
            {**TORCHRUN, "nnodes": 1, "nproc_per_node": 4},
        ),
        (
            ["torchrun", "--master_port", "29500", "--max-restarts", "3", "t.py"],
            "t.py",
            [],
            {**TORCHRUN, "max_restarts": 3},
        ),
        (
            ["python", "-m", "torch.distributed.launch", "--nproc_per_node=2", "t.py", "--lr", "2"],
            "t.py",
            ["--lr", "2"],
            {**TORCHRUN, "nproc_per_node": 2, "pass_local_rank_arg": True},
        ),
        (
            ["python", "-m", "torch.distributed.launch", "--use_env", "t.py"],
            "t.py",
            [],
            TORCHRUN,
        ),
        (["python", "-m", "torch.distributed.run", "t.py"], "t.py", [], TORCHRUN),
    ],
)
def test_commands_map_to_the_spec(
    command: list[str], entrypoint: str, args: list[str], fields: dict[str, Any]
) -> None:
    assert parse_command(command) == Program(entrypoint, args, fields)


def test_leading_assignments_are_the_ranks_environment() -> None:
    program = parse_command(["OMP_NUM_THREADS=2", "A=x=y", "python", "t.py", "B=1"])
    assert (program.env, program.args) == ({"OMP_NUM_THREADS": "2", "A": "x=y"}, ["B=1"])


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ([], "no program to run"),
        (["A=1"], "no program to run"),
        (["python"], "no script to run"),
        (["python", "-u"], "no script to run"),
        (["python", "-m", "mypkg.train"], "cannot run 'python -m mypkg.train'"),
        (["python", "-c", "print(1)"], "cannot run python with '-c'"),
        (["bash", "run.sh"], "cannot run 'bash'"),
        (["accelerate", "launch", "t.py"], "cannot run 'accelerate'"),
        (["torchrun", "--nproc-per-node", "gpu", "t.py"], "'gpu' is not a number"),
        (["torchrun", "--nnodes", "1:4", "t.py"], "'1:4' is not a number"),
        (["torchrun", "--no-python", "t.py"], "cannot run torchrun with '--no-python'"),
        (["torchrun", "-m", "pkg"], "cannot run torchrun with '-m'"),
        (["torchrun", "--nproc-per-node"], "needs a value"),
        (["torchrun", "--standalone"], "no script to run"),
    ],
)
def test_what_a_job_cannot_run_is_refused(command: list[str], says: str) -> None:
    with pytest.raises(CommandError) as refused:
        parse_command(command)
    assert says in refused.value.message and refused.value.code == "invalid_command"


@pytest.mark.parametrize(
    ("script", "inside"),
    [("train.py", "train.py"), ("./src//train.py", "src/train.py"), ("/w/p/a/t.py", "a/t.py")],
)
def test_the_script_is_a_path_inside_the_directory(script: str, inside: str) -> None:
    assert entrypoint_in("/w/p", script) == inside


@pytest.mark.parametrize("script", ["../t.py", "a/../../t.py", "/w/other/t.py", "/w/p", "."])
def test_a_script_outside_the_directory_is_refused(script: str) -> None:
    with pytest.raises(CommandError):
        entrypoint_in("/w/p", script)


CODE = "c" * 64


def spec_of(
    command: list[str], options: RunOptions | None = None, base: dict[str, Any] | None = None
) -> dict[str, Any]:
    return run_spec(
        parse_command(command), CODE, ["train.py"], options or RunOptions(), base, "mnist"
    )


def test_the_spec_runs_the_packed_script_with_one_rank_unless_told() -> None:
    assert spec_of(["python", "train.py", "--epochs", "1"]) == {
        "name": "mnist-train",
        "code": {"code_id": CODE, "entrypoint": "train.py"},
        "args": ["--epochs", "1"],
        "nproc_per_node": 1,
    }


def test_flags_then_the_command_then_the_spec_file() -> None:
    base = {"name": "mine", "nproc_per_node": 8, "queue": "q0", "env": {"A": "1", "B": "1"}}
    base |= {"args": ["old"], "code": {"code_id": "0" * 64}, "launcher": "python"}
    options = RunOptions(nnodes=2, queue="gpu", env={"B": "2"})
    spec = spec_of(["C=3", "torchrun", "--nproc-per-node", "2", "train.py"], options, base)
    assert spec == {
        "name": "mine",
        "code": {"code_id": CODE, "entrypoint": "train.py"},
        "args": [],
        "launcher": "torchrun",
        "nproc_per_node": 2,
        "nnodes": 2,
        "queue": "gpu",
        "env": {"A": "1", "B": "2", "C": "3"},
    }
    assert spec_of(["train.py"], base={"launcher": "python", "nproc_per_node": 2})["launcher"] == (
        "python"
    )


def test_refusals_of_the_spec() -> None:
    with pytest.raises(CommandError, match="disagree"):
        spec_of(["torchrun", "--nproc-per-node", "2", "train.py"], RunOptions(nproc_per_node=4))
    with pytest.raises(CommandError, match="names a recipe"):
        spec_of(["train.py"], base={"recipe": "digits"})
    with pytest.raises(CommandError) as refused:
        spec_of(["python", "missing.py"])
    assert refused.value.code == "entrypoint_not_packed"


def test_default_names() -> None:
    assert default_name("my project!", "src/train.py") == "my-project-train"
    assert default_name("", "t.py") == "t"
    assert default_name("\n", "---.py") == "run"
