"""P7, on a machine with CUDA: the built-in recipes under Launchbay on CUDA with nccl.

- steps/s with AMP off (fp32) and with bf16 autocast, each recipe, side by side: bf16 ÷ fp32;
- GPU utilisation while they train (`nvidia-smi`, sampled every 0.25 s between the first and
  the last metric line, averaged over the GPUs this process sees, by UUID);
- the stall a checkpoint save causes in the training loop: with a line every step and a
  checkpoint every CHECKPOINT_EVERY steps, the gap from the line of a saving step to the next
  line, minus the median gap between steps that neither save nor evaluate.

Without a CUDA device it returns one row saying it did not run. LAUNCHBAY_BENCH_P7_DEVICE=cpu
runs the same jobs on CPU with gloo and two ranks, to check the benchmark itself (there is no
utilisation to sample then).
"""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from bench.common import (
    Result,
    job_events,
    median,
    recipe_spec,
    running_stack,
    steps_per_second,
    submit_and_wait,
)
from devstack.stack import Stack

RECIPES = {  # as shipped (batch size, model), for a bounded number of steps
    "digits": {"steps": 1000, "log_every_steps": 10},
    "text": {"steps": 1000, "log_every_steps": 10},
}
CHECKPOINT_EVERY = 10  # steps; an epoch of digits is 23 steps on 2 ranks, 45 on 1
STALL_CONFIG = {"steps": 300, "log_every_steps": 1}
PLAIN_METRICS = {"loss", "lr"}  # a line with anything else also evaluated


@dataclass(frozen=True)
class Target:
    device: str  # cuda or cpu
    backend: str
    nproc: int
    gpu_name: str | None
    # The visible GPUs' UUIDs (as nvidia-smi writes them), whose utilisation is sampled.
    gpu_uuids: tuple[str, ...] = ()


# Asked in a child process, as the worker does: the benchmark process makes no CUDA context.
_CUDA_PROBE = """\
import json, torch
count = torch.cuda.device_count() if torch.cuda.is_available() else 0
props = [torch.cuda.get_device_properties(i) for i in range(count)]
print(json.dumps([count, props[0].name if props else None, [str(p.uuid) for p in props]]))
"""


def probe_cuda() -> tuple[int, str | None, tuple[str, ...]]:
    """(visible CUDA devices, the first one's name, their UUIDs), in nvidia-smi's order."""
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CUDA_PROBE],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
            env=env,
        )
        count, name, uuids = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return 0, None, ()
    return int(count), name, tuple(f"GPU-{u}" for u in uuids)


def find_target() -> Target | None:
    """Where P7 runs: every CUDA device here, or CPU when asked; None to skip it."""
    if os.environ.get("LAUNCHBAY_BENCH_P7_DEVICE") == "cpu":
        return Target("cpu", "gloo", 2, None)
    count, name, uuids = probe_cuda()
    if count == 0:
        return None
    return Target("cuda", "nccl", count, name, uuids)


class UtilisationSampler:
    """`nvidia-smi`'s utilization.gpu of the GPUs `uuids` (of every GPU, when none are
    given), every `interval` s, in a thread (none when not `enabled`)."""

    def __init__(self, enabled: bool, interval: float = 0.25, uuids: tuple[str, ...] = ()) -> None:
        self.enabled = enabled
        self.interval = interval
        self.uuids = uuids
        self.samples: list[tuple[float, float]] = []  # (time, mean % over the GPUs)
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "UtilisationSampler":
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.enabled:
            self._thread.join()

    def _sample(self) -> None:
        argv = [
            "nvidia-smi",
            "--query-gpu=uuid,utilization.gpu",
            "--format=csv,noheader,nounits",
        ]
        while not self._stop.wait(self.interval):
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True)
                self.samples.append((time.time(), parse_utilisation(done.stdout, self.uuids)))
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                self.error = f"nvidia-smi: {exc}"  # the row says so; the job goes on
                return

    def mean_between(self, start: float, end: float) -> float | None:
        inside = [value for t, value in self.samples if start <= t <= end]
        return sum(inside) / len(inside) if inside else None


def parse_utilisation(output: str, uuids: tuple[str, ...] = ()) -> float:
    """The mean of nvidia-smi's per-GPU `utilization.gpu` (percent) over the GPUs `uuids`
    (every GPU listed, when none are given); lines are `utilization` or `uuid, utilization`."""
    wanted = {u.lower() for u in uuids}
    values = []
    for line in output.splitlines():
        if not line.strip():
            continue
        uuid, _, value = line.rpartition(",")
        if wanted and uuid.strip().lower() not in wanted:
            continue
        values.append(float(value))
    if not values:
        raise ValueError(
            f"no utilisation of {uuids or 'any GPU'} in nvidia-smi's output: {output!r}"
        )
    return sum(values) / len(values)


def checkpoint_stalls(events: list[dict[str, Any]]) -> tuple[list[float], float]:
    """(each save's gap from its step's line to the next, minus the usual gap; that usual
    gap: the median between consecutive steps that neither save nor evaluate)."""
    metrics = sorted((e for e in events if e.get("type") == "metric"), key=lambda e: int(e["step"]))
    saved = {int(e["step"]) for e in events if e.get("type") == "checkpoint"}
    plain_gaps: list[float] = []
    save_gaps: list[float] = []
    for line, following in zip(metrics, metrics[1:], strict=False):
        if int(following["step"]) != int(line["step"]) + 1:
            continue
        if set(line["metrics"]) | set(following["metrics"]) != PLAIN_METRICS:
            continue  # an evaluation's line
        gap = float(following["ts"]) - float(line["ts"])
        (save_gaps if int(line["step"]) in saved else plain_gaps).append(gap)
    if not plain_gaps or not save_gaps:
        raise ValueError("no saving step and no plain step to compare")
    usual = median(plain_gaps)
    return [gap - usual for gap in save_gaps], usual


def job_spec(target: Target, recipe: str, config: dict[str, Any], amp: str) -> dict[str, Any]:
    spec = recipe_spec(f"p7-{recipe}-{amp}", recipe, config, target.nproc)
    return {**spec, "device": target.device, "backend": target.backend, "amp": amp}


def run_job(http: httpx.Client, stack: Stack, spec: dict[str, Any]) -> list[dict[str, Any]]:
    _, job = submit_and_wait(http, stack, spec)
    return job_events(stack, job["id"])


# long: each recipe's fp32/bf16 pairs and the checkpoint stall on one stack, then their
# rows (it runs only where a CUDA device is)
def run(rounds: int = 2) -> list[Result]:
    """`rounds` pairs (fp32, bf16) of each recipe, the first of a pair alternating."""
    target = find_target()
    if target is None:
        return [
            Result(
                "P7",
                "recipes on CUDA with nccl: fp32 vs bf16 steps/s, GPU utilisation, checkpoint "
                "stall",
                "not run: no CUDA device on this machine",
                "report",
                None,
            )
        ]
    sample = target.device == "cuda" and shutil.which("nvidia-smi") is not None
    where = (
        f"{target.nproc} × {target.gpu_name}, {target.backend}"
        if target.gpu_name
        else f"{target.nproc} CPU ranks, {target.backend} (a check of the benchmark)"
    )
    results: list[Result] = []
    with running_stack() as stack, stack.client() as http:
        for recipe, config in RECIPES.items():
            speed: dict[str, list[float]] = {"none": [], "bf16": []}
            busy: dict[str, list[float]] = {"none": [], "bf16": []}
            unsampled = "" if sample else "; GPU utilisation not sampled (no nvidia-smi)"
            for i in range(rounds):
                for amp in ("none", "bf16") if i % 2 == 0 else ("bf16", "none"):
                    with UtilisationSampler(sample, uuids=target.gpu_uuids) as sampler:
                        events = run_job(http, stack, job_spec(target, recipe, config, amp))
                    speed[amp].append(steps_per_second(events))
                    ts = [e["ts"] for e in events if e.get("type") == "metric"]
                    used = sampler.mean_between(min(ts), max(ts))
                    if used is not None:
                        busy[amp].append(used)
                    if sampler.error:
                        unsampled = f"; GPU utilisation not sampled ({sampler.error})"
            fp32, bf16 = median(speed["none"]), median(speed["bf16"])
            utilisation = (
                f"; GPU utilisation fp32 {median(busy['none']):.0f} %, bf16 "
                f"{median(busy['bf16']):.0f} %"
                if busy["none"] and busy["bf16"]
                else unsampled
                if target.device == "cuda"
                else ""
            )
            results.append(
                Result(
                    f"P7 {recipe}",
                    f"{recipe} recipe steps/s, bf16 autocast ÷ fp32, under Launchbay on {where}",
                    f"{bf16 / fp32:.2f} ({bf16:.1f} vs {fp32:.1f} steps/s, median of {rounds} "
                    f"each{utilisation})",
                    "report",
                    None,
                    ", ".join(f"{k}={v}" for k, v in config.items()),
                )
            )
        spec = job_spec(target, "digits", STALL_CONFIG, "none")
        spec["checkpoint"] = {"every_steps": CHECKPOINT_EVERY, "every_epochs": None}
        stalls, usual = checkpoint_stalls(run_job(http, stack, spec))
    results.append(
        Result(
            "P7 checkpoint",
            f"stall of the training loop at a checkpoint save (digits, {where})",
            f"median {1000 * median(stalls):.1f} ms, max {1000 * max(stalls):.1f} ms over "
            f"{len(stalls)} saves (a step otherwise {1000 * usual:.1f} ms)",
            "report",
            None,
            f"a line every step, a checkpoint every {CHECKPOINT_EVERY} steps; the save's gap "
            "to the next line minus the median gap of steps that neither save nor evaluate",
        )
    )
    return results
