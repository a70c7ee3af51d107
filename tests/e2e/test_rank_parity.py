"""A rank under Launchbay sees what a rank under bare `torchrun --standalone` sees: the same
environment where it bears on speed, the same thread counts, CPU priority, scheduling policy,
affinity, scheduling control groups and session group (Linux's autogroup), and unbuffered
output; and its supervisor's threads run in SCHED_BATCH, so they never pre-empt it when they
wake, yet cannot be starved by it. Both ways run the same program under a real torchrun;
nothing here is timed. Launchbay runs it both ways: warm (the default) and cold."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.procs import SESSION_MARKER, free_port
from tests.support.stack import Stack

PROBE = Path(__file__).resolve().parent / "programs" / "rank_probe.py"
# Variables that change how fast a rank computes, allocates or communicates.
SPEED_ENV_PREFIXES = (
    "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "DNNL_", "ONEDNN_", "MALLOC_", "LD_",
    "PYTHON", "TORCH", "ATEN_", "GLOO_", "NCCL_", "CUDA_", "TP_",
)  # fmt: skip
# Launchbay's on purpose (see worker.launch): for a job with elastic restarts, the rendezvous
# store is not shared with the ranks (rank 0 hosts the process group's); PYTHONUNBUFFERED is moot
# in a rank, which torchrun always starts with `python -u` (`unbuffered` is compared instead);
# CUDA_DEVICE_ORDER=PCI_BUS_ID numbers GPUs as nvidia-smi does (no effect on speed);
# TORCH_EXTENSIONS_DIR is where an owner's compiled ops are kept (worker.build_cache), read
# only by a program that compiles one.
EXPECTED_DIFFERENCES = {
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
    "PYTHONUNBUFFERED",
    "CUDA_DEVICE_ORDER",
    "TORCH_EXTENSIONS_DIR",
}
PER_RUN = ("TORCHELASTIC_",)
SAME = ("num_threads", "num_interop_threads", "nice", "policy", "affinity")
# A job's processes live in a cgroup of their own that limits memory and task count (see
# worker.cgroups): those controllers differ on purpose; the ones that schedule must not.
CONFINING_CONTROLLERS = {"memory", "pids"}


def scheduling_cgroups(text: str) -> list[str]:
    """`/proc/self/cgroup` lines (`id:controllers:path`) but those of the confining ones."""
    return [
        line
        for line in text.splitlines()
        if not CONFINING_CONTROLLERS & set(line.split(":")[1].split(","))
    ]


def speed_env(env: dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if k.startswith(SPEED_ENV_PREFIXES)
        and k not in EXPECTED_DIFFERENCES
        and not k.startswith(PER_RUN)
    }


def read_ranks(directory: Path) -> list[dict[str, Any]]:
    return [json.loads((directory / f"rank-{r}.json").read_text()) for r in range(2)]


def download_ranks(http: Any, job_id: str) -> list[dict[str, Any]]:
    """What the job's ranks wrote to its output directory, through the artifacts route."""
    answers = [http.get(f"/v1/jobs/{job_id}/artifacts/rank-{r}.json") for r in range(2)]
    for answer in answers:
        answer.raise_for_status()
    return [answer.json() for answer in answers]


def run_bare(out: Path, workdir: Path) -> list[dict[str, Any]]:
    """The probe under `torchrun --standalone`, started as a user would from this shell."""
    workdir.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAUNCHBAY_", "TORCHELASTIC_"))}
    env.update({SESSION_MARKER: os.environ.get(SESSION_MARKER, ""), "RANK_PROBE_DIR": str(out)})
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
        f"--log-dir={workdir / 'torchelastic'}",  # else a directory left in the host's /tmp
        str(PROBE),
    ]
    with open(workdir / "torchrun.log", "wb") as log:
        subprocess.run(argv, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
                       timeout=300, check=True)  # fmt: skip
    return read_ranks(out)


def run_launchbay(stack: Stack, **extra: Any) -> list[dict[str, Any]]:
    with stack.client() as http:
        with PROBE.open("rb") as fh:
            files = {"file": (PROBE.name, fh, "text/x-python")}
            code = http.post("/v1/code", files=files)
        code.raise_for_status()
        spec = {
            "name": "rank-parity",
            "code": {"code_id": code.json()["code_id"], "entrypoint": PROBE.name},
            "nproc_per_node": 2,
            **extra,
        }
        response = http.post("/v1/jobs", json=spec)
        response.raise_for_status()
        job_id = response.json()["id"]
        stack.wait_for_state(http, job_id, {"succeeded"}, timeout=300)
        return download_ranks(http, job_id)


def test_a_rank_sees_what_a_bare_torchrun_rank_sees(sqlite_stack: Stack, tmp_path: Path) -> None:
    bare = run_bare(tmp_path / "bare", tmp_path / "bare-run")
    # Warm (no launcher named: forked from the worker's fork server) and cold (torchrun).
    warm, cold = run_launchbay(sqlite_stack), run_launchbay(sqlite_stack, launcher="torchrun")
    for ours in (warm, cold):
        for rank in range(2):
            for key in SAME:
                assert ours[rank][key] == bare[rank][key], (rank, key)
            ours_cgroups = scheduling_cgroups(ours[rank]["cgroup"])
            assert ours_cgroups == scheduling_cgroups(bare[rank]["cgroup"]), rank
            assert ours[rank]["autogroup_nice"] == bare[rank]["autogroup_nice"], rank
            assert ours[rank]["unbuffered"] == bare[rank]["unbuffered"], rank
            assert speed_env(ours[rank]["env"]) == speed_env(bare[rank]["env"]), rank
        assert ours[0]["num_threads"] == 1  # torchrun's own default for several ranks on CPU
    # While the ranks run, the supervisor's threads never pre-empt them when they wake, yet
    # keep their share of the CPU (SCHED_BATCH = 3), the heartbeat's included. The probe finds
    # the supervisor as its launcher's parent: torchrun's (a warm launcher's is the fork server).
    threads = cold[0]["supervisor_threads"]
    assert threads and {policy for _, policy, _, _ in threads} == {os.SCHED_BATCH}, threads
    assert bare[0]["supervisor_threads"] == []
