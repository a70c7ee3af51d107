"""Everything an attempt needs before its launch: checks that would only fail later and less
clearly (devices, modules, entrypoint), its directories, its working directory (a fresh writable
copy of the code, `worker.workdir`), the checkpoint to resume from and a free port. A failed
check is a `LaunchProblem`: the job fails with exit reason `launch_error` and the problem as its
message.
"""

import importlib.util
import os
import shutil
import socket
import sys
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy.engine import Engine

from jobs.contract import env as rank_env
from jobs.spec import JobSpec
from jobs.startup_env import startup_env_names
from service.artifacts import ArtifactStore, LocalStore
from worker import carried_state
from worker.checkpoints import WORK_KEY
from worker.devices import (
    CudaInfo,
    WorkerDevices,
    reserved_devices,
    slot_cores,
    worker_devices,
)
from worker.devices import detect_cuda as detect_cuda  # where attempt.py and main.py find it
from worker.fetch import find_resume_checkpoint
from worker.launch import (
    DEFAULT_COLLECTIVE_TIMEOUT_S,
    LaunchPlan,
    Rendezvous,
    RunPaths,
    build_launch,
)
from worker.workdir import make_work_dir, restore_checkpoint


class LaunchProblem(Exception):
    """The attempt cannot be launched; the message says why, for the job's user."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def parse_spec(raw: dict[str, object]) -> JobSpec:
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise LaunchProblem(f"the job spec is no longer valid here: {exc}") from None


def check_resources(spec: JobSpec, cuda: CudaInfo, devices: WorkerDevices | None = None) -> None:
    """Refuse what this worker cannot run. A job takes `nproc_per_node` of the worker's
    devices (`worker.devices`: its GPUs, else its CPU slots), whatever its launcher (the
    python launcher's one process may start that many of its own) and its `device`."""
    if spec.device == "cuda" and not cuda.available:
        raise LaunchProblem("device=cuda, but this worker has no CUDA device")
    uses_cuda = spec.uses_cuda(cuda.available)
    if spec.backend == "nccl" and not uses_cuda:
        raise LaunchProblem("backend=nccl needs CUDA devices; use gloo (or auto) on CPU")
    devices = devices or worker_devices(cuda)
    if spec.nproc_per_node > devices.count:
        # Not lowered to fit: the spec (nproc_per_node 2 by default) says what was accepted
        # and a retry elsewhere may fit; the message says what to change.
        default = JobSpec.model_fields["nproc_per_node"].default
        said = " (the default, for a spec that does not set it)" * (spec.nproc_per_node == default)
        raise LaunchProblem(
            f"nproc_per_node={spec.nproc_per_node}{said}, but this worker has "
            f"{devices.describe()}: set nproc_per_node: {devices.count} (or fewer) in the job "
            f"spec, or submit it to a queue whose workers have {spec.nproc_per_node} or more"
        )
    if spec.launcher == "torchrun" and not torchrun_installed():
        raise LaunchProblem("torchrun (torch.distributed.run) is not installed on this worker")


@lru_cache
def torchrun_installed() -> bool:
    """Whether torch's `torch.distributed.run` is installed, found without importing torch
    (`find_spec` of a submodule imports its packages: seconds, in the worker)."""
    torch = importlib.util.find_spec("torch")
    places = (torch.submodule_search_locations or []) if torch is not None else []
    return any((Path(place) / "distributed" / "run.py").is_file() for place in places)


def recipe_module(name: str) -> str:
    from jobs.recipes import RECIPES

    recipe = RECIPES.get(name)
    if recipe is None:
        raise LaunchProblem(f"unknown recipe {name!r}")
    try:
        found = importlib.util.find_spec(recipe.module)
    except ImportError:
        found = None
    if found is None:
        raise LaunchProblem(f"the module {recipe.module} of recipe {name!r} cannot be found")
    return recipe.module


def prepare_code(code_store: Path, code_id: str, target: Path, entrypoint: str) -> Path:
    """A fresh writable copy of uploaded code (`<code_store>/<code_id>`: an unpacked directory,
    or a single file) as the directory `target`; returns the entrypoint's path there."""
    source = code_store / code_id
    if not source.exists():
        raise LaunchProblem(f"uploaded code {code_id} is not on this worker")
    try:
        make_work_dir(target, source, entrypoint)
    except OSError as exc:
        raise LaunchProblem(f"the working directory could not be made: {exc}") from None
    script = target / entrypoint
    base = target.resolve()
    if not script.resolve().is_relative_to(base) or not script.resolve().is_file():
        raise LaunchProblem(f"entrypoint {entrypoint!r} is not a file in the uploaded code")
    return script


def prepare_work_dir(spec: JobSpec, paths: RunPaths, code_store: Path) -> None:
    """The attempt's working directory: a copy of the job's code, or empty for a recipe; the
    writable checkpoint directories of earlier attempts are gone (what they registered is
    kept, and a resumed attempt gets its own copy), but for what rank 0 carries to the next
    attempt (`worker.carried_state`)."""
    if spec.code is not None:
        prepare_code(code_store, spec.code.code_id, paths.work_dir, spec.code.entrypoint)
    else:
        make_work_dir(paths.work_dir, None, None)
    for earlier in paths.layout.attempts_checkpoints(paths.job_id):
        if earlier != paths.checkpoint_dir:
            carried_state.keep(paths, earlier)  # a multi-node attempt's, kept with the job
            shutil.rmtree(earlier, ignore_errors=True)
    carried_state.restore(paths)


def resume_copy(kept: Path, paths: RunPaths) -> Path:
    """Where the attempt resumes from: a copy of the kept checkpoint where the program wrote it,
    in the working directory (a declared output) or the attempt's checkpoint directory."""
    rel = Path(os.path.relpath(kept, paths.kept_dir))
    if rel.parts[0] == "..":  # not where checkpoints are kept (never, for a row of this job)
        rel = Path(kept.name)
    try:
        if rel.parts[0] == WORK_KEY and len(rel.parts) > 1:
            return restore_checkpoint(kept, paths.work_dir.joinpath(*rel.parts[1:]))
        return restore_checkpoint(kept, paths.checkpoint_dir / rel)
    except OSError as exc:
        raise LaunchProblem(f"the checkpoint to resume from could not be copied: {exc}") from None


def prepare_attempt(
    engine: Engine,
    *,
    spec: JobSpec,
    job_id: str,
    attempt: int,
    paths: RunPaths,
    code_store: Path,
    cuda: CudaInfo,
    collective_timeout_s: int = DEFAULT_COLLECTIVE_TIMEOUT_S,
    rendezvous: Rendezvous | None = None,
    python: str | None = None,
    store: ArtifactStore | None = None,
    reserved: Sequence[str] | None = None,
    pass_env: Sequence[str] = (),
) -> LaunchPlan:
    """Check, make the directories, copy the code and build the launch plan (of one node,
    meeting the others at `rendezvous`, for a multi-node job), run by `python` (the job's own
    environment's interpreter; by default the worker's), on the devices the dispatcher
    `reserved` for it (by default the worker's first `nproc_per_node`), with the worker's
    variables `pass_env` names as well (`LAUNCHBAY_JOB_PASS_ENV`). The checkpoint to resume
    from is fetched from `store` (default: the data dir) when this worker does not hold it."""
    devices = None if reserved is None else reserved_devices(worker_devices(cuda), reserved)
    check_resources(spec, cuda, devices)
    if startup_env_names(spec.env):  # a spec stored before the API refused these names
        names = ", ".join(startup_env_names(spec.env))
        raise LaunchProblem(f"the job's env sets variables no job may set: {names}")
    module = recipe_module(spec.recipe) if spec.recipe is not None else None
    for directory in (paths.run_dir, paths.log_dir, paths.checkpoint_dir, paths.output_dir):
        directory.mkdir(parents=True, exist_ok=True)
    paths.kept_dir.mkdir(parents=True, exist_ok=True)
    prepare_work_dir(spec, paths, code_store)
    kept = find_resume_checkpoint(
        engine, job_id, attempt, paths.data_dir, store or LocalStore(paths.data_dir)
    )
    plan = build_launch(
        spec,
        job_id=job_id,
        attempt=attempt,
        paths=paths,
        resume_from=None if kept is None else resume_copy(kept, paths),
        cuda_available=cuda.available,
        port=free_port(),
        python=python or sys.executable,
        base_env=dict(os.environ),
        recipe_module=module,
        default_collective_timeout_s=collective_timeout_s,
        rendezvous=rendezvous,
        gpus=(devices or worker_devices(cuda)).gpus,
        pass_env=pass_env,
    )
    if reserved is None or (devices is not None and devices.gpus):
        return plan
    # CPU slots: the job's processes see, and are pinned to, its own (`worker.lifeline`).
    pinned = {
        rank_env.CPU_SLOTS: ",".join(reserved),
        rank_env.CPU_AFFINITY: ",".join(str(c) for c in slot_cores(reserved)),
    }
    return replace(plan, env={**plan.env, **pinned})
