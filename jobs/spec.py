"""The job spec: what a user submits, validated, with every default filled.

Unknown fields are refused rather than ignored, so a typo never silently changes a run.
"""

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from jobs.contract.checkpoints import CheckpointPolicy
from jobs.environment import EnvironmentSpec
from jobs.outputs import Outputs
from jobs.user_regex import BadPattern, compile_user_regex

__all__ = ["LAUNCHER_ENV", "CheckpointPolicy", "CodeRef", "JobSpec", "Outputs"]

# What a launcher (torchrun) sets for each rank it starts.
LAUNCHER_ENV = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "ROLE_NAME",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
# What the worker sets to give a job its GPUs (worker/launch.py): a job may not choose its own.
DEVICE_ENV = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NVIDIA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
    }
)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
MAX_LOG_METRICS = 16
# Named groups of a `log_metrics` pattern that say where a point is, not what it measures.
POINT_GROUPS = frozenset({"step", "epoch"})


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CodeRef(StrictModel):
    """User code uploaded with `POST /v1/code`, and the file to run inside it."""

    code_id: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    entrypoint: Annotated[str, Field(min_length=1, max_length=512)] = "train.py"

    @field_validator("entrypoint")
    @classmethod
    def _relative_inside(cls, value: str) -> str:
        parts = value.replace("\\", "/").split("/")
        if value.startswith("/") or ".." in parts:
            raise ValueError("entrypoint must be a relative path inside the uploaded code")
        return value


class JobSpec(StrictModel):
    name: Annotated[str, Field(min_length=1, max_length=128)]
    recipe: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    code: CodeRef | None = None
    args: Annotated[list[Annotated[str, Field(max_length=4096)]], Field(max_length=256)] = []
    config: Annotated[dict[str, Any], Field(validate_default=True)] = {}
    launcher: Literal["torchrun", "python"] = "torchrun"
    # Give each rank --local-rank=N (`dash`) or --local_rank=N (`underscore`) before `args`;
    # true: the spelling the script's source uses (worker/rank_main.py), else `dash`.
    pass_local_rank_arg: bool | Literal["underscore", "dash"] = False
    nnodes: Annotated[int, Field(ge=1, le=64)] = 1
    nproc_per_node: Annotated[int, Field(ge=1, le=64)] = 2
    device: Literal["auto", "cpu", "cuda"] = "auto"
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    amp: Literal["none", "fp16", "bf16"] = "none"
    env: dict[str, Annotated[str, Field(max_length=32768)]] = {}
    # Names of `env` whose values are secrets: stored and given to the ranks, never shown back.
    secret_env: Annotated[list[Annotated[str, Field(max_length=256)]], Field(max_length=256)] = []
    queue: str = "default"
    # Higher runs first under the dispatcher (docs/scheduling.md); above the owner's policy
    # maximum is refused for a non-admin.
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    max_restarts: Annotated[int, Field(ge=0, le=100)] = 0
    max_retries: Annotated[int, Field(ge=0, le=100)] = 0
    timeout_s: Annotated[float, Field(gt=0, le=30 * 24 * 3600)] | None = None
    hang_timeout_s: Annotated[float, Field(gt=0, le=30 * 24 * 3600)] | None = None
    # nnodes > 1: how long every node may take to join before the attempt fails with
    # `rendezvous_timeout` (null: the worker's LAUNCHBAY_RENDEZVOUS_TIMEOUT_S).
    rendezvous_timeout_s: Annotated[float, Field(gt=0, le=24 * 3600)] | None = None
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    # What a plain program writes in its working directory that is a checkpoint, or an artifact
    # to keep (jobs/outputs.py); null: no checkpoint declared, every file written kept.
    outputs: Outputs | None = None
    # The job's own Python packages (worker/environment.py); null: the code's requirements.txt.
    environment: EnvironmentSpec | None = None
    # Memory of all the job's processes on one node together (its cgroup's limit); past it the
    # kernel kills one and the job ends `oom`. Capped by the policy.
    memory_limit_bytes: Annotated[int, Field(ge=16 * 2**20, le=2**50)] | None = None
    tags: dict[
        Annotated[str, Field(min_length=1, max_length=128)],
        Annotated[str, Field(max_length=1024)],
    ] = {}
    # What the program records without edits: its framework's integration attached on import,
    # TensorBoard scalars, `log_metrics` (docs/training-scripts.md, "Capture"); `off`: none.
    capture: Literal["auto", "off"] = "auto"
    # Patterns (RE2, `jobs.user_regex`) matched against rank 0's log lines: each named group is a
    # metric, `step` and `epoch` give the point's step and epoch.
    log_metrics: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=256)]], Field(max_length=MAX_LOG_METRICS)
    ] = []

    @field_validator("config")
    @classmethod
    def _recipe_config(cls, config: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Validated by the recipe's own model, defaults filled; a field validator, so that
        errors are located under `config` (e.g. `config.lr`)."""
        from jobs.recipes import RECIPES

        recipe = RECIPES.get(info.data.get("recipe") or "")
        if recipe is None:
            return config  # no recipe (user code), or an unknown one reported below
        return recipe.config_model.model_validate(config).model_dump(mode="json")

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        bad = sorted(k for k in env if not ENV_NAME.match(k))
        if bad:
            raise ValueError(f"environment variable names must be identifiers: {bad}")
        return env

    @field_validator("secret_env")
    @classmethod
    def _secrets_in_env(cls, names: list[str], info: ValidationInfo) -> list[str]:
        env = info.data.get("env")
        if env is None:
            return names  # env itself is invalid and reported
        unknown = sorted(set(names) - set(env))
        if unknown:
            raise ValueError(f"secret_env names variables that env does not set: {unknown}")
        return list(dict.fromkeys(names))

    @field_validator("log_metrics")
    @classmethod
    def _log_metric_patterns(cls, patterns: list[str]) -> list[str]:
        for number, pattern in enumerate(patterns):
            try:
                compiled = compile_user_regex(pattern, capture=True).compiled
            except BadPattern as exc:
                raise ValueError(f"log_metrics[{number}]: {exc}") from None
            if not set(compiled.groupindex) - POINT_GROUPS:
                raise ValueError(
                    f"log_metrics[{number}] names no metric: give it a named group, "
                    "as in 'loss=(?P<loss>[0-9.eE+-]+)'"
                )
        return patterns

    @field_validator("name")
    @classmethod
    def _no_control_characters(cls, name: str) -> str:
        if CONTROL_CHARS.search(name):
            raise ValueError("name must not contain control characters")
        return name

    @field_validator("queue")
    @classmethod
    def _queue_name(cls, queue: str) -> str:
        if not QUEUE_NAME.match(queue):
            raise ValueError("queue must be 1..64 letters, digits, '_', '.' or '-'")
        return queue

    @model_validator(mode="after")
    def _one_program(self) -> "JobSpec":
        if (self.recipe is None) == (self.code is None):
            raise ValueError("give exactly one of 'recipe' and 'code'")
        if self.recipe is not None:
            from jobs.recipes import RECIPES

            recipe = RECIPES.get(self.recipe)
            if recipe is None:
                raise ValueError(
                    f"unknown recipe {self.recipe!r}; known: {', '.join(sorted(RECIPES))}"
                )
        if self.environment is not None and self.environment.requirements_file is not None:
            if self.code is None:
                raise ValueError("environment.requirements_file needs uploaded code")
        if self.launcher == "python" and self.pass_local_rank_arg:
            raise ValueError("pass_local_rank_arg applies to the torchrun launcher only")
        if self.launcher == "python" and self.nnodes > 1:
            raise ValueError("nnodes > 1 needs the torchrun launcher")
        if self.capture == "off" and self.log_metrics:
            raise ValueError("log_metrics is part of capture: it needs capture 'auto'")
        return self

    def resolved_backend(self, cuda_available: bool) -> str:
        """`auto` is nccl on CUDA and gloo otherwise."""
        if self.backend != "auto":
            return self.backend
        return "nccl" if self.uses_cuda(cuda_available) else "gloo"

    def uses_cuda(self, cuda_available: bool) -> bool:
        return self.device == "cuda" or (self.device == "auto" and cuda_available)
