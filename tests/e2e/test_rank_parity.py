"""A rank under Launchbay sees what a rank under bare `torchrun --standalone` sees: the same
environment where it bears on speed, the same thread counts, CPU priority, scheduling policy,
affinity, control groups and session group (Linux's autogroup), and unbuffered output. Both
ways run the same program under a real torchrun; nothing here is timed."""

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
# Launchbay's on purpose (see worker.launch): the rendezvous store is not shared with the
# ranks (rank 0 hosts the process group's, idle once it is set up); PYTHONUNBUFFERED is moot
# in a rank, which torchrun always starts with `python -u` (`unbuffered` is compared instead).
EXPECTED_DIFFERENCES = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "PYTHONUNBUFFERED"}
PER_RUN = ("TORCHELASTIC_",)
SAME = ("num_threads", "num_interop_threads", "nice", "policy", "affinity", "cgroup")


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
        str(PROBE),
    ]
    with open(workdir / "torchrun.log", "wb") as log:
        subprocess.run(argv, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
                       timeout=300, check=True)  # fmt: skip
    return read_ranks(out)


def run_launchbay(stack: Stack, out: Path) -> list[dict[str, Any]]:
    with stack.client() as http:
        with PROBE.open("rb") as fh:
            files = {"file": (PROBE.name, fh, "text/x-python")}
            code = http.post("/v1/code", files=files)
        code.raise_for_status()
        spec = {
            "name": "rank-parity",
            "code": {"code_id": code.json()["code_id"], "entrypoint": PROBE.name},
            "nproc_per_node": 2,
            "env": {"RANK_PROBE_DIR": str(out)},
        }
        response = http.post("/v1/jobs", json=spec)
        response.raise_for_status()
        stack.wait_for_state(http, response.json()["id"], {"succeeded"}, timeout=300)
    return read_ranks(out)


def test_a_rank_sees_what_a_bare_torchrun_rank_sees(sqlite_stack: Stack, tmp_path: Path) -> None:
    bare = run_bare(tmp_path / "bare", tmp_path / "bare-run")
    ours = run_launchbay(sqlite_stack, tmp_path / "launchbay")
    for rank in range(2):
        for key in SAME:
            assert ours[rank][key] == bare[rank][key], (rank, key)
        assert ours[rank]["autogroup_nice"] == bare[rank]["autogroup_nice"], rank
        assert ours[rank]["unbuffered"] == bare[rank]["unbuffered"], rank
        assert speed_env(ours[rank]["env"]) == speed_env(bare[rank]["env"]), rank
    assert ours[0]["num_threads"] == 1  # torchrun's own default for several ranks on CPU
