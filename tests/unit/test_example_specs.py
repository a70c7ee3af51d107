"""The job specs shipped in examples/: each is one the API accepts as written (the spec's
fields, the recipe's config, the submission policy's forbidden env names), the NCCL smoke
job is the one docs/deployment.md's first-hour checklist runs, and every example program has a
spec file beside it that runs it on a CPU machine."""

import re
import shlex
from pathlib import Path

import pytest

from client.program import RunOptions, parse_command, run_spec
from client.specfile import apply_assignments, load_spec
from jobs.recipes import get_recipe
from jobs.spec import JobSpec
from service.policy import forbidden_env_names
from service.settings import DEFAULT_FORBIDDEN_ENV

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", SPECS, ids=[p.name for p in SPECS])
def test_an_example_spec_is_accepted_as_written(path: Path) -> None:
    spec = JobSpec.model_validate(load_spec(path))
    assert spec.recipe is not None
    get_recipe(spec.recipe).validate_config(spec.config)
    assert forbidden_env_names(spec.env, DEFAULT_FORBIDDEN_ENV) == []


def test_the_nccl_smoke_job_runs_nccl_on_gpus_and_says_how_it_connects() -> None:
    raw = load_spec(ROOT / "examples" / "nccl-smoke.yaml")
    spec = JobSpec.model_validate(raw)
    # On CUDA or not at all: a worker without CUDA refuses it instead of training on CPU.
    assert (spec.device, spec.backend) == ("cuda", "nccl")
    assert spec.env["NCCL_DEBUG"] == "INFO"
    assert "NET" in spec.env["NCCL_DEBUG_SUBSYS"].split(",")
    assert spec.timeout_s is not None and spec.timeout_s <= 300
    assert spec.hang_timeout_s is not None and spec.hang_timeout_s <= 120
    # The checklist's command sizes it to the worker's GPUs.
    sized = JobSpec.model_validate(apply_assignments(raw, ["nproc_per_node=8"]))
    assert sized.nproc_per_node == 8

    checklist = (ROOT / "docs" / "deployment.md").read_text()
    checklist = checklist[checklist.index("## First hour on a GPU host") :]
    assert "launchbay submit examples/nccl-smoke.yaml" in checklist
    assert "--set nproc_per_node=" in checklist


# Every example program, with the spec file beside it that runs it on a CPU machine (gloo).
PROGRAMS = sorted(
    [
        *(ROOT / "examples" / "scripts").glob("*.py"),
        *(ROOT / "examples" / "integrations").glob("*.py"),
    ]
)
# The spec file's own line saying how to run it, from its directory.
RUN_LINE = re.compile(r"^#\s+launchbay run -f (?P<spec>\S+) -- (?P<command>.+)$", re.MULTILINE)
CODE_ID = "c0de" * 16
CPU_MACHINE_CORES = 2


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_every_example_program_has_a_spec_file_beside_it_that_runs_on_a_cpu_machine(
    program: Path,
) -> None:
    spec_file = program.with_suffix(".yaml")
    assert spec_file.is_file(), f"{program.name} has no spec file beside it"
    raw = load_spec(spec_file)
    assert raw["code"] == {"entrypoint": program.name}  # the file it names exists: this one
    # As `launchbay run` sends it, from the spec file's own line ...
    run = RUN_LINE.search(spec_file.read_text())
    assert run is not None and run["spec"] == spec_file.name
    command = parse_command(shlex.split(run["command"]))
    assert (program.parent / command.entrypoint) == program
    packed = sorted(p.name for p in program.parent.iterdir() if p.is_file())
    sent = run_spec(command, CODE_ID, packed, RunOptions(), raw, program.parent.name)
    # ... and as `launchbay submit` sends it, with the upload's code_id: the same job.
    submitted = apply_assignments(raw, [f"code.code_id={CODE_ID}"])
    assert JobSpec.model_validate(sent) == JobSpec.model_validate(submitted)
    spec = JobSpec.model_validate(sent)
    # It fits a CPU machine: no GPU asked for, gloo, one node, a rank or two.
    assert spec.device in ("cpu", "auto") and spec.backend in ("gloo", "auto")
    assert spec.nnodes == 1 and spec.nproc_per_node <= CPU_MACHINE_CORES
    assert forbidden_env_names(spec.env, DEFAULT_FORBIDDEN_ENV) == []
    # The program's docstring points to it instead of a copy that could drift.
    assert f"`{spec_file.name}`, beside it" in program.read_text()
