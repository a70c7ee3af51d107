"""P1I: training steps/s under Launchbay ÷ bare torchrun, the ways interleaved in slices.

P1 and P1L run one way after another, 16 s to a few minutes each, and this 2-core VM's speed
drifts by ±10-20 % over that time: six rounds cannot resolve 2 %. Here every way's job runs
at once, each paused (SIGSTOP to its torchrun agent and ranks) but for its own slice of a
couple of seconds, the ways taking turns in an order that rotates each round. Drift slower
than a round cancels, and a run of a few minutes gives a hundred or more slices a way.

The ways: bare torchrun (twice: `bare` and `bare-again`, the control, which shows what the
slicing itself resolves), Launchbay (a job submitted over HTTP to the stack's API and worker)
and, when Ray is installed, Ray Jobs. The services (Launchbay's API, worker and the job's
supervisor; Ray's head node and its job supervisor) keep running through every slice, as in
P1L ("up at once and idle when not measured"). Only the jobs' own processes are paused.

Each slice's rate is steps/s between the first and the last metric line rank 0 wrote within
it (after a warm-up); each round's ratio is a way's rate ÷ bare's in the same round. The
CPU that Launchbay's own processes take in its slices and in the others' is counted from
/proc (`bench.p1_counts`), so what they take while they are not measured is on the record,
and so is each way's CPU per step (its agent's and ranks'): a way whose ranks do more work
per step shows it there, one whose ranks wait more shows it only in steps/s.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.common import (
    Result,
    attempt_paths,
    bare_command,
    median,
    read_events,
    recipe_spec,
    running_stack,
)
from bench.p1_counts import (
    Totals,
    difference,
    has_metric,
    process_tree,
    service_pids,
    snapshot,
)
from bench.p1_p2_training import rotated, spread
from bench.ray_peer import RayCluster, ray_available
from devstack.stack import Stack

CONFIG: dict[str, Any] = {"steps": 10_000_000, "log_every_steps": 10}
MODULE = "jobs.recipes.digits"
ROUNDS = 40
SLICE_S = 2.0
WARM_S = 0.4
NOT_RUN = "not run: Ray is not installed (`pip install -e '.[bench]'`)"


@dataclass
class Way:
    """One way of running the job: its events file, and the processes paused between its
    slices (the torchrun agent and its descendants, found by the events file in their
    environment)."""

    name: str
    events: Path
    stop: Callable[[], None]
    procs: list[psutil.Process] = field(default_factory=list)
    slices: list[tuple[float, float]] = field(default_factory=list)
    # CPU seconds of the agent and ranks in each slice
    cpu: list[float] = field(default_factory=list)

    def cpu_s(self) -> float:
        total = 0.0
        for proc in self.procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total

    def find(self, timeout_s: float = 180.0) -> None:
        """Wait for rank 0's first metric line, then find the agent and its ranks."""
        deadline = time.monotonic() + timeout_s
        while not has_metric(self.events):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no metric line in {timeout_s:.0f} s")
            time.sleep(0.2)
        agent = _agent_of(self.events)
        self.procs = [psutil.Process(pid) for pid in process_tree(agent)]

    def signal(self, sig: signal.Signals) -> None:
        for proc in self.procs:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                continue

    def cpu_ms_per_step(self) -> list[float]:
        """The agent's and ranks' CPU per step in each slice (both ranks' together)."""
        return [
            1e3 * cpu / (rate * (ended - began))
            for cpu, rate, (began, ended) in zip(self.cpu, self.rates(), self.slices, strict=True)
        ]

    def rates(self) -> list[float]:
        """Steps/s in each slice, between the first and last metric lines within it."""
        points = sorted(
            (e["ts"], e["step"])
            for e in read_events(self.events)
            if e.get("type") == "metric" and "ts" in e
        )
        out = []
        for began, ended in self.slices:
            inside = [(t, s) for t, s in points if began <= t <= ended]
            (t0, s0), (t1, s1) = inside[0], inside[-1]
            out.append((s1 - s0) / (t1 - t0))
        return out


def _agent_of(events: Path) -> int:
    """The torchrun agent whose environment names `events` (ranks are its children)."""
    wanted = f"LAUNCHBAY_EVENTS_FILE={events}".encode()
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "torch.distributed.run" not in cmdline and "torchrun" not in cmdline:
            continue
        try:
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in environ:
            return proc.pid
    raise RuntimeError(f"no torchrun agent found for {events}")


def bare_way(name: str, workdir: Path) -> Way:
    argv, env, events = bare_command(MODULE, CONFIG, workdir)
    with (workdir / "output.log").open("wb") as output:
        proc = subprocess.Popen(
            argv, env=env, cwd=workdir, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def stop() -> None:
        try:
            os.killpg(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    return Way(name, events, stop)


def launchbay_way(stack: Stack, http: httpx.Client) -> Way:
    spec = recipe_spec("p1i", MODULE.rsplit(".", 1)[-1], CONFIG, 2)
    response = http.post("/v1/jobs", json=spec)
    response.raise_for_status()
    job_id = response.json()["id"]
    events = attempt_paths(stack, job_id).events_file

    def stop() -> None:
        http.post(f"/v1/jobs/{job_id}/cancel").raise_for_status()
        stack.wait_for_state(http, job_id, {"cancelled"}, timeout=60)

    return Way("launchbay", events, stop)


def ray_way(ray: RayCluster, workdir: Path) -> Way:
    job_id, events = ray.submit(MODULE, CONFIG, workdir, 2)
    return Way("ray", events, lambda: ray.stop_job(job_id))


@dataclass
class ServiceCpu:
    """Launchbay's processes' CPU seconds in Launchbay's slices and in the other ways'."""

    own: Totals = field(default_factory=Totals)
    own_s: float = 0.0
    others: Totals = field(default_factory=Totals)
    others_s: float = 0.0

    def add(self, own: bool, totals: Totals, seconds: float) -> None:
        if own:
            self.own.cpu_s += totals.cpu_s
            self.own_s += seconds
        else:
            self.others.cpu_s += totals.cpu_s
            self.others_s += seconds

    def text(self) -> str:
        return (
            f"Launchbay's processes took {1e3 * self.own.cpu_s / max(self.own_s, 1e-9):.1f} ms "
            f"of CPU a second in its slices, "
            f"{1e3 * self.others.cpu_s / max(self.others_s, 1e-9):.1f} ms in the others'"
        )


@contextmanager
def all_ways(scratch: Path, with_ray: bool) -> Iterator[tuple[list[Way], Stack]]:
    with ExitStack() as context:
        stack = context.enter_context(running_stack())
        http = context.enter_context(stack.client())
        ray = context.enter_context(RayCluster()) if with_ray else None
        ways: list[Way] = []
        try:
            # Each way starts alone and is paused once it trains: start-up is not measured.
            starters: list[Callable[[], Way]] = [
                lambda: bare_way("bare", scratch / "bare"),
                lambda: launchbay_way(stack, http),
                lambda: bare_way("bare-again", scratch / "bare-again"),
            ]
            if ray is not None:
                starters.append(lambda: ray_way(ray, scratch / "ray"))
            for start in starters:
                way = start()
                ways.append(way)
                way.find()
                way.signal(signal.SIGSTOP)
            yield ways, stack
        finally:
            for way in ways:
                way.signal(signal.SIGCONT)
                try:
                    way.stop()
                except Exception as exc:  # the others are stopped all the same
                    print(f"bench: stopping {way.name}: {exc}", file=sys.stderr)


def measure(ways: list[Way], stack: Stack, rounds: int) -> ServiceCpu:
    service = service_pids(stack)
    cpu = ServiceCpu()
    for i in range(rounds):
        for way in rotated(ways, i):
            way.signal(signal.SIGCONT)
            time.sleep(WARM_S)
            before, began, used = snapshot(service), time.time(), way.cpu_s()
            time.sleep(SLICE_S)
            ended, after, used = time.time(), snapshot(service), way.cpu_s() - used
            way.signal(signal.SIGSTOP)
            way.slices.append((began, ended))
            way.cpu.append(used)
            cpu.add(way.name == "launchbay", difference(before, after), ended - began)
    return cpu


def run(rounds: int = ROUNDS) -> list[Result]:
    scratch = Path(tempfile.mkdtemp(prefix="launchbay-bench-p1i-"))
    with_ray = ray_available()
    with all_ways(scratch, with_ray) as (ways, stack):
        service = measure(ways, stack, rounds)
    rates = {way.name: way.rates() for way in ways}
    bare = rates["bare"]
    (scratch / "rates.json").write_text(json.dumps(rates))
    per_step = {way.name: median(way.cpu_ms_per_step()) for way in ways}

    def row(rid: str, what: str, name: str, goal: str, met: bool | None, notes: str) -> Result:
        ratios = [w / b for w, b in zip(rates[name], bare, strict=True)]
        ratio = median(ratios)
        cpu = f"agent and ranks {per_step[name]:.1f} ms of CPU a step (bare {per_step['bare']:.1f})"
        return Result(
            rid,
            what,
            f"{ratio:.3f} ({median(rates[name]):.1f} vs {median(bare):.1f} steps/s; median of "
            f"{len(ratios)} rounds, ratios {spread(ratios)})",
            goal,
            met if met is None else ratio >= 0.99,
            f"{notes}; {cpu}",
        )

    how = (
        f"the ways interleaved: slices of {SLICE_S:.0f} s after {WARM_S} s of warm-up, order "
        f"rotated each round; {CONFIG['log_every_steps']} steps a metric line"
    )
    lb_notes = f"{how}; {service.text()}"
    if with_ray:
        below = sum(lb < r for lb, r in zip(rates["launchbay"], rates["ray"], strict=True))
        lb_ray = median(rates["launchbay"]) / median(rates["ray"])
        lb_notes += f"; Launchbay below Ray in {below} of {rounds} rounds (medians ÷ {lb_ray:.3f})"
    results = [
        row("P1I", "training steps/s, digits recipe, 2 ranks: Launchbay ÷ bare torchrun",
            "launchbay", "≥ 0.99", True, lb_notes),
        row("P1I-control", "the same: bare torchrun ÷ another bare torchrun (what the slicing "
            "resolves)", "bare-again", "report", None, how),
    ]  # fmt: skip
    if with_ray:
        results.append(
            row(
                "P1I-ray",
                "the same through Ray Jobs: Ray ÷ bare torchrun",
                "ray",
                "report",
                None,
                how,
            )  # fmt: skip
        )
    else:
        results.append(Result("P1I-ray", "the same through Ray Jobs", NOT_RUN, "report", None))
    return results
