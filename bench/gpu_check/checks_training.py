"""The checks that train: the NCCL smoke example, an all_reduce whose sums are known, each
built-in recipe in fp32 and bf16 (P7) with the GPU utilisation meanwhile, the stall of a
checkpoint save, that checkpoint loaded by a process without CUDA, and scaling over GPUs."""

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import job_events, median, steps_per_second
from bench.gpu_check.report import Row, excerpt, not_run, passed, verdict
from bench.gpu_check.session import REPO, Session
from bench.p7_gpu import CHECKPOINT_EVERY, STALL_CONFIG, UtilisationSampler, checkpoint_stalls
from bench.p7_gpu import job_spec as p7_spec

# Each recipe for a bounded number of steps (as P7 runs them); --quick: digits alone, briefly.
RECIPES: dict[str, dict[str, Any]] = {
    "synthetic": {"steps": 1000, "log_every_steps": 10, "num_samples": 65536},
    "digits": {"steps": 1000, "log_every_steps": 10},
    "text": {"steps": 1000, "log_every_steps": 10},
}
QUICK_RECIPES: dict[str, dict[str, Any]] = {"digits": {"steps": 60, "log_every_steps": 5}}
QUICK_STALL = {"steps": 60, "log_every_steps": 1}
SMOKE_LIMIT_S = 60


def check_nccl_smoke(session: Session) -> Row:
    """examples/nccl-smoke.yaml as shipped, one rank per GPU (--cpu: gloo on 2 CPU ranks)."""
    spec = yaml.safe_load((REPO / "examples" / "nccl-smoke.yaml").read_text())
    spec["nproc_per_node"] = session.target.nproc
    if not session.cuda:
        spec.update(device="cpu", backend="gloo")
    started = time.monotonic()
    job = session.run(spec, timeout_s=180)
    took = time.monotonic() - started
    lines = session.log_lines(job["id"])
    n, backend = session.target.nproc, session.target.backend
    joined = [f"rank {r}/{n} on" for r in range(n)]
    ranks_ok = all(any(j in line and f"({backend})" in line for line in lines) for j in joined)
    nccl = [line for line in lines if "NCCL INFO" in line]
    ok = job["state"] == "succeeded" and ranks_ok
    if session.cuda:
        ok = ok and bool(nccl) and took <= SMOKE_LIMIT_S
    proof = excerpt(lines, f"({backend})", n) + "\n" + excerpt(nccl, "NCCL version", 1)
    proof += "\n" + excerpt(nccl, "Init COMPLETE", 2)
    detail = f"{session.outcome(job)} in {took:.1f} s (limit {SMOKE_LIMIT_S} s on CUDA)\n{proof}"
    return verdict("nccl_smoke", ok, round(took, 1), "s", detail.strip())


def check_all_reduce(session: Session) -> Row:
    """Every rank all-reduces rank + 1 and finds world * (world + 1) / 2 everywhere."""
    mib, iters = ("64", "10") if session.cuda else ("8", "3")
    spec = session.program_spec("gpu-check-all-reduce", "allreduce.py", args=["--mib", mib])
    spec["args"] += ["--iters", iters]
    job = session.run(spec, timeout_s=180)
    lines = session.log_lines(job["id"])
    sums = [line for line in lines if "all_reduce: world" in line]
    points = {p["name"]: p["value"] for p in session.metrics(job["id"])}
    ok = (
        job["state"] == "succeeded"
        and len(sums) == session.target.nproc
        and all(" sum ok " in line for line in sums)
        and points.get("sum_ok") == 1.0
    )
    detail = f"{session.outcome(job)}\n{excerpt(sums)}"
    return verdict("all_reduce", ok, points.get("ms"), f"ms per {mib} MiB", detail)


# long: each recipe's pair of jobs (fp32, bf16), their rows, and the utilisation row after them
def check_recipes(session: Session) -> list[Row]:
    """Each built-in recipe with AMP off and with bf16 (P7), the pair's order alternating, with
    nvidia-smi sampling the GPUs meanwhile; a row per recipe, then the utilisation."""
    recipes = QUICK_RECIPES if session.quick else RECIPES
    sample = session.cuda
    rows: list[Row] = []
    busy: dict[str, float] = {}
    sampling_error = ""
    for index, (recipe, config) in enumerate(recipes.items()):
        speed: dict[str, float] = {}
        outcomes = []
        for amp in ("none", "bf16") if index % 2 == 0 else ("bf16", "none"):
            spec = p7_spec(session.target, recipe, config, amp)
            with UtilisationSampler(sample, uuids=session.target.gpu_uuids) as sampler:
                job = session.run(spec, timeout_s=300)
            outcomes.append(f"{amp}: {session.outcome(job)}")
            if job["state"] != "succeeded":
                continue
            events = job_events(session.stack, job["id"])
            speed[amp] = steps_per_second(events)
            ts = [e["ts"] for e in events if e.get("type") == "metric"]
            used = sampler.mean_between(min(ts), max(ts))
            if used is not None:
                busy[f"{recipe} {amp}"] = used
            sampling_error = sampler.error or sampling_error
        where = f"{session.target.nproc} × {session.target.gpu_name}" if session.cuda else "CPU"
        if len(speed) < 2:
            rows.append(Row(f"recipe_{recipe}", "fail", None, "", "\n".join(outcomes)))
            continue
        ratio = speed["bf16"] / speed["none"]
        detail = (
            f"bf16 {speed['bf16']:.1f} vs fp32 {speed['none']:.1f} steps/s on {where} "
            f"({', '.join(f'{k}={v}' for k, v in config.items())})"
        )
        rows.append(passed(f"recipe_{recipe}", round(ratio, 3), "bf16 ÷ fp32", detail))
    if not session.cuda:
        rows.append(not_run("gpu_utilisation", "needs CUDA: this run is --cpu"))
    elif busy:
        shown = ", ".join(f"{k} {v:.0f} %" for k, v in busy.items())
        mean = sum(busy.values()) / len(busy)
        rows.append(passed("gpu_utilisation", round(mean, 1), "%", f"mean over jobs: {shown}"))
    else:
        rows.append(Row("gpu_utilisation", "fail", None, "", sampling_error or "no sample"))
    return rows


def check_checkpoints(session: Session) -> list[Row]:
    """The stall a checkpoint save causes in the training loop (digits, a checkpoint every
    CHECKPOINT_EVERY steps), then its latest checkpoint loaded where CUDA is hidden."""
    config = QUICK_STALL if session.quick else STALL_CONFIG
    spec = p7_spec(session.target, "digits", config, "none")
    spec["checkpoint"] = {"every_steps": CHECKPOINT_EVERY, "every_epochs": None, "keep_last": 2}
    job = session.run(spec, timeout_s=300)
    if job["state"] != "succeeded":
        detail = session.outcome(job)
        return [
            Row("checkpoint_stall", "fail", None, "", detail),
            not_run("checkpoint_loads_on_cpu", "no checkpoint"),
        ]
    stalls, usual = checkpoint_stalls(job_events(session.stack, job["id"]))
    detail = (
        f"median over {len(stalls)} saves; max {1000 * max(stalls):.1f} ms; a step otherwise "
        f"{1000 * usual:.1f} ms (digits, fp32, a checkpoint every {CHECKPOINT_EVERY} steps)"
    )
    stall = passed("checkpoint_stall", round(1000 * median(stalls), 2), "ms", detail)
    return [stall, load_on_cpu(session, job["id"])]


# Loads a checkpoint as a user would on a laptop: torch.load's defaults, no map_location, with
# CUDA hidden; every tensor must be on the CPU and the model's weights load into DigitsNet.
LOAD_ON_CPU = """\
import sys, torch
from jobs.recipes.digits import DigitsNet
state = torch.load(sys.argv[1])
tensors = [t for t in state["model"].values() if isinstance(t, torch.Tensor)]
devices = sorted({str(t.device) for t in tensors})
DigitsNet().load_state_dict(state["model"])
print(f"{len(tensors)} model tensors on {devices}, step {state['step']}, CUDA visible: "
      f"{torch.cuda.is_available()}; loaded into DigitsNet")
"""


def load_on_cpu(session: Session, job_id: str) -> Row:
    """The job's latest checkpoint, downloaded over HTTP, loaded by a process without CUDA."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "latest.pt"
        response = session.http.get(f"/v1/jobs/{job_id}/checkpoints/latest/download")
        if response.status_code != 200:
            return Row("checkpoint_loads_on_cpu", "fail", None, "", response.text[:500])
        path.write_bytes(response.content)
        env = {**session.stack.env(), "CUDA_VISIBLE_DEVICES": ""}
        done = subprocess.run(
            [sys.executable, "-c", LOAD_ON_CPU, str(path)],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
    said = (done.stdout + done.stderr).strip()
    ok = done.returncode == 0 and "on ['cpu']" in said and "CUDA visible: False" in said
    saved_on = "saved by ranks on CUDA" if session.cuda else "saved on CPU"
    detail = f"{saved_on}; torch.load without map_location: {said[-600:]}"
    return verdict("checkpoint_loads_on_cpu", ok, len(response.content), "bytes", detail)


def check_scaling(session: Session) -> Row:
    """Samples/s of digits on 2 GPUs ÷ on 1 (DDP; the batch is per rank)."""
    if not session.cuda or session.target.nproc < 2:
        why = "needs CUDA: this run is --cpu" if not session.cuda else "one GPU here"
        return not_run("scaling", f"{why}: 2-rank DDP ÷ 1 GPU not measured")
    config = {"steps": 1000, "log_every_steps": 10}
    rates = {}
    for nproc in (1, 2):
        spec = {**p7_spec(session.target, "digits", config, "none"), "nproc_per_node": nproc}
        job = session.run(spec, timeout_s=300)
        if job["state"] != "succeeded":
            return Row("scaling", "fail", None, "", f"{nproc} GPU(s): {session.outcome(job)}")
        rates[nproc] = nproc * steps_per_second(job_events(session.stack, job["id"]))
    detail = f"digits fp32, samples/s ÷ batch: 1 GPU {rates[1]:.1f}, 2 GPUs {rates[2]:.1f}"
    return passed("scaling", round(rates[2] / rates[1], 3), "2 GPUs ÷ 1", detail)
