"""The job specs shipped in examples/: each is one the API accepts as written (the spec's
fields, the recipe's config, the submission policy's forbidden env names), and the NCCL smoke
job is the one docs/deployment.md's first-hour checklist runs."""

from pathlib import Path

import pytest

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
