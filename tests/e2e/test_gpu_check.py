"""`scripts/gpu-check.sh --cpu --quick` end to end: the harness a GPU host runs, run here with
gloo on CPU so that it cannot rot. The rows that need no CUDA really run (real stack, real
torchrun, real jobs) and pass; each CUDA-only row is `not_run` with its reason."""

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_ON_CPU = {
    "machine",
    "worker_refusal",
    "nccl_smoke",
    "all_reduce",
    "cancel",
    "hang",
    "checkpoint_stall",
    "checkpoint_loads_on_cpu",
    "recipe_digits",
    "teardown",
}
CUDA_ONLY = {"device_probe", "mig", "cuda_oom", "gpu_utilisation", "scaling", "gpu_sampler"}
FIELDS = {"check", "status", "value", "unit", "detail"}


def test_the_gpu_check_runs_on_cpu_and_reports_every_row(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check.sh"), "--cpu", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    rows = json.loads((out / "report.json").read_text())
    assert all(set(row) == FIELDS for row in rows)
    by_check = {row["check"]: row for row in rows}
    assert len(by_check) == len(rows)
    assert {c for c, r in by_check.items() if r["status"] == "pass"} == RUN_ON_CPU
    assert {c for c, r in by_check.items() if r["status"] == "not_run"} == CUDA_ONLY
    assert all(by_check[c]["detail"] for c in CUDA_ONLY)
    # What each row proves, read back from its own evidence.
    assert "build without CUDA" in by_check["worker_refusal"]["detail"]
    assert "rank 1/2 on cpu (gloo)" in by_check["nccl_smoke"]["detail"]
    assert by_check["all_reduce"]["detail"].count(" sum ok ") == 2
    assert by_check["cancel"]["value"] <= 5  # the stack's grace (3 s) + 2 s
    assert "failed (hang)" in by_check["hang"]["detail"]
    assert "stacks of ranks [0, 1]" in by_check["hang"]["detail"]
    assert "on ['cpu']" in by_check["checkpoint_loads_on_cpu"]["detail"]
    assert by_check["recipe_digits"]["value"] > 0
    assert by_check["teardown"]["value"] == 0
    markdown = (out / "report.md").read_text()
    assert all(f"| {check} | " in markdown for check in by_check)
