"""What to run for one attempt of a job: the command, its environment and its directory.

`build_launch` is a pure function of the spec and the attempt's facts (paths, port, devices):
it starts nothing and reads nothing, so every launch detail is tested without launching.

Each rank's program is started through `rank_main.py` (see its docstring), which sends the
rank's stdout and stderr to ``<log dir>/rank-<RANK>.log`` and records an uncaught exception:

    torchrun:  python -I -m torch.distributed.run --nnodes=1 --nproc-per-node=N ... --no-python
                   python -I -u <worker>/rank_main.py --log-dir LOGS [--local-rank-arg]
                   (--module M | --script S) ARGS
    python:    python -I -u <worker>/rank_main.py --log-dir LOGS --children --script S ARGS
               (one process; what it starts logs as ranks of their own)

Every interpreter runs isolated (``-I``: no ``PYTHON*`` variable, no user site directory, no
working directory on ``sys.path``), so a job's `env` cannot steer what Python loads at start-up;
the names below the interpreter (loader, C library) never reach it (`jobs.startup_env`).
"""

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from jobs.contract import env as rank_env
from jobs.contract import rank_files
from jobs.contract.data_dir import DataLayout
from jobs.spec import DEVICE_ENV, JobSpec
from jobs.startup_env import is_startup_env
from worker.passed_env import passed_env

# The NCCL flight recorder's dump files, in an attempt's log directory: `<prefix><rank>`.
FLIGHT_RECORDER_PREFIX = "nccl-trace-rank-"

RANK_ENTRY = Path(__file__).resolve().with_name("rank_main.py")
# Isolated mode: PYTHON* variables and the user site ignored, nothing unsafe on sys.path.
ISOLATED = "-I"
LOCALHOST = "127.0.0.1"
COLLECTIVE_TIMEOUT_ENV = rank_env.COLLECTIVE_TIMEOUT_S
# Which node of a multi-node job a rank runs on (our node index, not torchrun's GROUP_RANK).
NODE_ENV = rank_env.NODE
# torchrun's rendezvous store, shared with the ranks by default, keeps the process group's keys
# across elastic restarts: a restarted rank could read a dead peer's gloo address ("Gloo
# connectFullMesh failed ... Connection refused"). Off, rank 0 hosts a fresh store each round,
# which costs every rank 0.2-0.6 s in `init_process_group` (the others wait, retrying, for rank
# 0's store to listen): only where there are restarts (`max_restarts` > 0).
FRESH_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800
# Process-group set-up runs under the same timeout: never so short that slow starts fail it.
MIN_COLLECTIVE_TIMEOUT_S = 30


@dataclass(frozen=True)
class RunPaths:
    """Where one attempt lives on disk, in the data dir's layout (`jobs.contract.data_dir`).

    Its run directory, ``runs/<job>/attempt-<n>/`` (``.../node-<k>/`` per node of a multi-node
    job), holds the events file, ``logs/`` (one file per rank, the launcher's own output, error
    records: `jobs.contract.rank_files`) and ``work/``, the ranks' working directory
    (`worker.workdir`); ``runs/<job>/attempt-<n>/checkpoints/``, shared by the nodes, is where
    the ranks write checkpoints (``LAUNCHBAY_CHECKPOINT_DIR``). What Launchbay registers is kept
    apart, in ``checkpoints/<job>/`` (`kept_dir`), which no job writes; the job's artifacts are
    in ``artifacts/<job>/`` (`output_dir`). Both are shared by every attempt.
    """

    data_dir: Path
    run_dir: Path
    events_file: Path
    checkpoint_dir: Path
    log_dir: Path
    job_id: str

    @classmethod
    def for_attempt(
        cls, data_dir: Path, job_id: str, attempt: int, node: int | None = None
    ) -> "RunPaths":
        """The attempt's paths; for node `node` of a multi-node job, its own run directory
        ``attempt-<n>/node-<k>/`` (several nodes may share the data dir, even one machine)."""
        layout = DataLayout(data_dir)
        run_dir = layout.run_dir(job_id, attempt, node)
        return cls(
            data_dir=data_dir,
            run_dir=run_dir,
            events_file=run_dir / "events.jsonl",
            checkpoint_dir=layout.attempt_checkpoints(job_id, attempt),
            log_dir=run_dir / "logs",
            job_id=job_id,
        )

    @property
    def layout(self) -> DataLayout:
        return DataLayout(self.data_dir)

    @property
    def work_dir(self) -> Path:
        """The ranks' working directory: a writable copy of the code (`worker.workdir`)."""
        return self.run_dir / "work"

    @property
    def kept_dir(self) -> Path:
        """The checkpoints Launchbay registered, its own copies (`worker.checkpoints`)."""
        return self.layout.kept_checkpoints(self.job_id)

    @property
    def output_dir(self) -> Path:
        """`LAUNCHBAY_OUTPUT_DIR`: the job's artifacts, shared by its attempts, kept after it."""
        return self.layout.job_artifacts(self.job_id)

    @property
    def home_dir(self) -> Path:
        return self.run_dir / "home"

    @property
    def launcher_log(self) -> Path:
        return self.log_dir / "launcher.log"

    @property
    def torchelastic_dir(self) -> Path:
        return self.log_dir / "torchelastic"

    @property
    def pids_file(self) -> Path:
        return self.run_dir / "pids.json"

    def rank_log(self, rank: int) -> Path:
        return rank_files.LOG.path(self.log_dir, rank)


@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes of a multi-node attempt meet (torchrun's c10d rendezvous): `endpoint`
    (`host:port`) is hosted by the node that joined first (`is_host`); `local_addr` is the
    address the other nodes reach this one at; `timeout_s` is how long every node may take to
    join before the supervisor stops this one; `node` is this node's number."""

    endpoint: str
    is_host: bool
    local_addr: str
    timeout_s: float
    node: int

    @property
    def join_timeout_s(self) -> int:
        """torchrun's own limit on waiting for every node: a backstop, a minute after the
        supervisor's."""
        return math.ceil(self.timeout_s) + 60


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    # Processes that mean "the ranks have started": N under torchrun, the one process otherwise.
    expected_ranks: int = 1
    launcher: str = "torchrun"
    # Whether the worker has CUDA: a program that needs it says so when it has none.
    cuda_available: bool = False
    # What each rank runs (`rank_main.py` and the program) and torchrun's run: what a warm
    # start (`worker.warm_start`) starts in torchrun's place on a single node.
    entry: tuple[str, ...] = ()
    run_id: str = ""
    max_restarts: int = 0
    torchelastic_dir: Path | None = None


# long: every part of a launch meets here, in the order of precedence its docstring gives
def build_launch(
    spec: JobSpec,
    *,
    job_id: str,
    attempt: int,
    paths: RunPaths,
    resume_from: Path | None,
    cuda_available: bool,
    port: int,
    python: str,
    base_env: Mapping[str, str],
    recipe_module: str | None = None,
    default_collective_timeout_s: int = DEFAULT_COLLECTIVE_TIMEOUT_S,
    rendezvous: Rendezvous | None = None,
    gpus: Sequence[str] = (),
    pass_env: Sequence[str] = (),
) -> LaunchPlan:
    """The command, environment and working directory of one attempt (of one node of it, with
    `rendezvous`, for a multi-node job).

    `port` is a free local port: torchrun's c10d rendezvous endpoint, or MASTER_PORT for the
    `python` launcher; a multi-node job meets at `rendezvous.endpoint` instead.
    `recipe_module` is the recipe's module (required for `recipe:` specs).
    `base_env` is the worker's own environment; the ranks get what `worker.passed_env` allows
    of it (and the names or prefixes of `pass_env`), then `spec.env`, then Launchbay's
    variables, which nothing overrides.
    `gpus` are the worker's GPUs (CUDA ids); the job sees the first `nproc_per_node` of them.
    """
    cwd, entry = rank_entry(spec, paths, python, recipe_module)
    env = build_env(
        spec,
        job_id=job_id,
        attempt=attempt,
        paths=paths,
        resume_from=resume_from,
        cuda_available=cuda_available,
        base_env=base_env,
        default_collective_timeout_s=default_collective_timeout_s,
        gpus=gpus,
        pass_env=pass_env,
    )
    if rendezvous is not None:
        env[NODE_ENV] = str(rendezvous.node)
    if spec.launcher == "python":
        env.update(
            MASTER_ADDR=LOCALHOST, MASTER_PORT=str(port), WORLD_SIZE=str(spec.nproc_per_node)
        )
        return LaunchPlan(entry, env, cwd, launcher="python", cuda_available=cuda_available)
    argv = torchrun_argv(
        spec,
        job_id=job_id,
        attempt=attempt,
        paths=paths,
        port=port,
        python=python,
        entry=entry,
        rendezvous=rendezvous,
    )
    return LaunchPlan(
        argv,
        env,
        cwd,
        spec.nproc_per_node,
        cuda_available=cuda_available,
        entry=tuple(entry),
        run_id=f"{job_id}-{attempt}",
        max_restarts=spec.max_restarts,
        torchelastic_dir=paths.torchelastic_dir,
    )


def rank_entry(
    spec: JobSpec, paths: RunPaths, python: str, recipe_module: str | None
) -> tuple[Path, list[str]]:
    """(the ranks' working directory, the command each rank runs: `rank_main.py` and the
    program, its arguments after it)."""
    cwd = paths.work_dir
    if spec.code is not None:
        program = ["--script", str(paths.work_dir / spec.code.entrypoint)]
    else:
        if not recipe_module:
            raise ValueError(f"recipe {spec.recipe!r} needs its module")
        program = ["--module", recipe_module]
    entry = [python, ISOLATED, "-u", str(RANK_ENTRY), "--log-dir", str(paths.log_dir)]
    if spec.pass_local_rank_arg and spec.launcher == "torchrun":
        spelling = "auto" if spec.pass_local_rank_arg is True else spec.pass_local_rank_arg
        entry.append(f"--local-rank-arg={spelling}")
    if spec.launcher == "python":
        entry.append("--children")
    return cwd, [*entry, *program, *spec.args]


def torchrun_argv(
    spec: JobSpec,
    *,
    job_id: str,
    attempt: int,
    paths: RunPaths,
    port: int,
    python: str,
    entry: list[str],
    rendezvous: Rendezvous | None,
) -> list[str]:
    """torchrun's command line, running `entry` as each rank: a standalone rendezvous on
    `port`, or, for a node of a multi-node job, the one at `rendezvous.endpoint`."""
    if rendezvous is None:
        endpoint, local_addr, conf = f"{LOCALHOST}:{port}", LOCALHOST, []
    else:
        endpoint, local_addr = rendezvous.endpoint, rendezvous.local_addr
        is_host = int(rendezvous.is_host)
        conf = [f"--rdzv-conf=is_host={is_host},join_timeout={rendezvous.join_timeout_s}"]
    return [
        python,
        ISOLATED,  # also: the working directory holds user code, which must not shadow torch
        "-m",
        "torch.distributed.run",
        f"--nnodes={spec.nnodes}",
        f"--nproc-per-node={spec.nproc_per_node}",
        f"--max-restarts={spec.max_restarts}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={job_id}-{attempt}",
        *conf,
        f"--local-addr={local_addr}",
        f"--log-dir={paths.torchelastic_dir}",
        "--no-python",  # the rank's interpreter and its flags are the entry's first words
        *entry,
    ]


def build_env(
    spec: JobSpec,
    *,
    job_id: str,
    attempt: int,
    paths: RunPaths,
    resume_from: Path | None,
    cuda_available: bool,
    base_env: Mapping[str, str],
    default_collective_timeout_s: int = DEFAULT_COLLECTIVE_TIMEOUT_S,
    gpus: Sequence[str] = (),
    pass_env: Sequence[str] = (),
) -> dict[str, str]:
    """Every rank's environment (see `build_launch` for the order of precedence; the
    collective timeout is the one value of Launchbay's that `spec.env` may set)."""
    env = passed_env(base_env, pass_env)
    # The GPUs are the worker's to give, whatever the spec says (the API refuses them too).
    env.update({k: v for k, v in spec.env.items() if k not in DEVICE_ENV and not is_startup_env(k)})
    env.update(gpu_env(spec, gpus))
    uses_cuda = spec.uses_cuda(cuda_available)
    if not uses_cuda and "OMP_NUM_THREADS" not in spec.env:
        env["OMP_NUM_THREADS"] = "1"
    env.update({k: v for k, v in framework_env(spec, uses_cuda).items() if k not in spec.env})
    env.pop(rank_env.RESUME_FROM, None)
    env.pop(NODE_ENV, None)
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            rank_env.JOB_ID: job_id,
            rank_env.ATTEMPT: str(attempt),
            rank_env.EVENTS_FILE: str(paths.events_file),
            rank_env.CHECKPOINT_DIR: str(paths.checkpoint_dir),
            rank_env.LOG_DIR: str(paths.log_dir),
            rank_env.OUTPUT_DIR: str(paths.output_dir),
            rank_env.CONFIG: json.dumps(spec.config, separators=(",", ":")),
            rank_env.AMP: spec.amp,
            rank_env.DEVICE: "cuda" if uses_cuda else "cpu",
            rank_env.BACKEND: spec.resolved_backend(cuda_available),
            rank_env.CHECKPOINT: spec.checkpoint.model_dump_json(),
            rank_env.CAPTURE: spec.capture,
        }
    )
    if resume_from is not None:
        env[rank_env.RESUME_FROM] = str(resume_from)
    if uses_cuda:
        recorder = flight_recorder_env(paths.log_dir)
        env.update({k: v for k, v in recorder.items() if k not in spec.env})
    if spec.launcher == "torchrun" and spec.max_restarts > 0 and FRESH_STORE_ENV not in spec.env:
        env[FRESH_STORE_ENV] = "1"
    if COLLECTIVE_TIMEOUT_ENV not in spec.env:
        env[COLLECTIVE_TIMEOUT_ENV] = str(collective_timeout_s(spec, default_collective_timeout_s))
    return env


def framework_env(spec: JobSpec, uses_cuda: bool) -> dict[str, str]:
    """What the frameworks need to run a torchrun job's ranks as one process group, left at
    their defaults: on CPU, accelerate (and the transformers Trainer, which runs on it) forms
    no group unless told `ACCELERATE_USE_CPU`, and Lightning's `devices="auto"` is one CPU
    device (so each rank trains alone) unless `PL_TRAINER_DEVICES` (a default its Trainer
    reads; a value the program passes wins) says how many. A job's `env` wins over these."""
    env: dict[str, str] = {}
    if spec.launcher != "torchrun":
        return env
    if not uses_cuda:
        env.update(ACCELERATE_USE_CPU="1", PL_TRAINER_ACCELERATOR="cpu")
    env.update(PL_TRAINER_DEVICES=str(spec.nproc_per_node), PL_TRAINER_NUM_NODES=str(spec.nnodes))
    return env


def flight_recorder_env(log_dir: Path) -> dict[str, str]:
    """The environment that turns on PyTorch's NCCL flight recorder for a CUDA job: a ring of
    the last collectives, dumped (one file per rank, `<prefix><rank>`) when a NCCL collective
    times out; `worker.stacks` names the dumps with the ranks' stacks. Untested here: these
    machines have no GPU."""
    return {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(log_dir / FLIGHT_RECORDER_PREFIX),
    }


def gpu_env(spec: JobSpec, gpus: Sequence[str]) -> dict[str, str]:
    """The GPUs a job sees: the first `nproc_per_node` of its worker's, numbered in PCI bus
    order as nvidia-smi does (a worker without GPUs passes its own CUDA_VISIBLE_DEVICES on)."""
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[: spec.nproc_per_node])
    return env


def collective_timeout_s(spec: JobSpec, default_s: int = DEFAULT_COLLECTIVE_TIMEOUT_S) -> int:
    """Seconds a collective (NCCL/gloo) may wait for a peer before the rank fails, so a lost peer
    ends the job instead of blocking it forever: the spec's `hang_timeout_s` (the job is
    killed then anyway), at least MIN_COLLECTIVE_TIMEOUT_S; without one, `default_s`."""
    if spec.hang_timeout_s is None:
        return default_s
    return max(MIN_COLLECTIVE_TIMEOUT_S, math.ceil(spec.hang_timeout_s))
