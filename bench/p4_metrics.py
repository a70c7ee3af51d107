"""P4a: metric points/s that the worker ingests from one job, and what reporting costs the
training steps. One program, uploaded as code, run as one torchrun rank (a one-rank world, so
its speed does not hang on how two ranks share two cores), `report()`s 20 metrics a step:

- sustained: every step, a light step (more points/s offered than the goal): the points/s
  the worker stores = points ÷ (the moment all are in the database − the first write);
- alternating: phases of N steps cycling through reporting off, written (each line before
  report() returns, the default), off, queued (`queue_reports`: the SDK's thread writes the
  lines), off, plain (the program appends the same line to the events file itself:
  json.dumps and one unbuffered write, no SDK) in the same process; the step rate of each "on" phase
  ÷ the mean of the "off" phases either side of it, median of those ratios, for each way
  (side by side at a sub-second scale, so the other loads of this shared machine and their
  drift hit both alike). The program also times what it spends reporting.

P4b: rank-0 write (`ts` in the events line) → receipt by an SSE client of
`GET /v1/jobs/{id}/events`, at 20 lines/s.
"""

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
import psutil

from bench.common import (
    NO_CHECKPOINTS,
    Result,
    SseParser,
    attempt_paths,
    job_events,
    median,
    percentile,
    running_stack,
    upload_code,
)
from bench.p4_programs import SSE_SOURCE, TRAIN_SOURCE
from devstack.stack import Stack
from jobs.states import JobState

METRICS_PER_STEP = 20
SUSTAINED_WIDTH = 1024  # about 2 ms a step on one core here: ~10,000 points/s offered
ALTERNATING_WIDTH = 1200  # about 2.5 ms a step: ~8,000 points/s while reporting
CYCLE = ("off", "written", "off", "queued", "off", "plain")  # the alternating run's phases


@dataclass
class Phase:
    mode: str  # off, written (report(), the default), queued (queue_reports) or plain (by hand)
    steps: int
    seconds: float
    report_s: float

    @property
    def rate(self) -> float:
        return self.steps / self.seconds


@dataclass
class TrainingRun:
    phases: list[Phase]
    points: int  # metric points the API returns for the job
    written: int  # points rank 0 wrote
    ingest_rate: float  # points / (all in the DB − first point written), in points/s
    done_after_last_s: float  # last point written → all of them in the DB
    max_age_s: float  # while running: now − ts of the newest ingested point, worst poll
    horse_cpu: float  # the work horse's CPU use while the ranks ran (1.0 = one core)


def work_horse(stack: Stack) -> psutil.Process | None:
    """The forked RQ work horse supervising the current job, if there is one."""
    try:
        children = psutil.Process(stack.workers[0].pid).children()
    except psutil.NoSuchProcess:
        return None
    return children[0] if children else None


def cpu_seconds(proc: psutil.Process | None) -> float | None:
    if proc is None:
        return None
    try:
        times = proc.cpu_times()
    except psutil.NoSuchProcess:
        return None
    return float(times.user + times.system)


def count_points(http: httpx.Client, job_id: str) -> int:
    count, after = 0, 0
    while True:
        page = http.get(f"/v1/jobs/{job_id}/metrics", params={"after": after, "limit": 10_000})
        page.raise_for_status()
        body = page.json()
        if not body["items"]:
            return count
        count += len(body["items"])
        after = body["next_after"]


def training_spec(
    code_id: str, *, steps: int, width: int, phase_steps: int, warmup: int
) -> dict[str, Any]:
    """The job of one P4a run: `train.py` reporting METRICS_PER_STEP metrics a step."""
    return {
        "name": f"p4a-{'alternating' if phase_steps else 'sustained'}",
        "code": {"code_id": code_id, "entrypoint": "train.py"},
        "args": [
            *(str(a) for a in (steps, warmup, METRICS_PER_STEP, width, phase_steps)),
            ",".join(CYCLE),
        ],
        "nproc_per_node": 1,
        "checkpoint": NO_CHECKPOINTS,
    }


def run_training(
    http: httpx.Client,
    stack: Stack,
    code_id: str,
    *,
    steps: int,
    width: int,
    phase_steps: int = 0,
    warmup: int = 100,
    poll_s: float = 0.1,
) -> TrainingRun:
    spec = training_spec(code_id, steps=steps, width=width, phase_steps=phase_steps, warmup=warmup)
    response = http.post("/v1/jobs", json=spec)
    response.raise_for_status()
    job_id = response.json()["id"]
    polls: list[tuple[float, int | None]] = []
    cpu: list[tuple[float, float]] = []
    horse = None
    deadline = time.monotonic() + 300
    while True:
        job = http.get(f"/v1/jobs/{job_id}").json()
        now = time.time()
        if job["state"] == JobState.RUNNING:
            polls.append((now, job["progress"]["step"]))
            horse = horse or work_horse(stack)
            used = cpu_seconds(horse)
            if used is not None:
                cpu.append((now, used))
        if JobState(job["state"]).is_terminal():
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"P4a job {job_id} did not end: {job}")
        time.sleep(poll_s)
    if job["state"] != JobState.SUCCEEDED:
        raise RuntimeError(f"P4a job {job_id} ended {job['state']}: {job['message']}")
    result = json.loads((attempt_paths(stack, job_id).output_dir / "bench_result.json").read_text())
    phases = [Phase(p["mode"], p["steps"], p["s"], p["report_s"]) for p in result["phases"]]
    reported = [e for e in job_events(stack, job_id) if e.get("type") == "metric"]
    ts_of_step = {e["step"]: e["ts"] for e in reported}
    written = sum(len(e["metrics"]) for e in reported)
    points = count_points(http, job_id)
    first_ts, last_ts, final_step = reported[0]["ts"], reported[-1]["ts"], reported[-1]["step"]
    # The first poll that saw the last step stored; else it was stored after the last poll.
    done_at = next((t for t, s in polls if s is not None and s >= final_step), polls[-1][0])
    ages = [t - ts_of_step[s] for t, s in polls if s in ts_of_step]
    horse_cpu = (cpu[-1][1] - cpu[0][1]) / (cpu[-1][0] - cpu[0][0]) if len(cpu) > 1 else 0.0
    return TrainingRun(
        phases=phases,
        points=points,
        written=written,
        ingest_rate=points / (done_at - first_ts),
        done_after_last_s=done_at - last_ts,
        max_age_s=max(ages, default=0.0),
        horse_cpu=horse_cpu,
    )


def sse_latencies(
    http: httpx.Client, code_id: str, count: int, rate: float
) -> tuple[list[float], int]:
    """(write → SSE receipt of each `lat` point, points sent before the stream was open)."""
    spec = {
        "name": "p4b",
        "code": {"code_id": code_id, "entrypoint": "lines.py"},
        "args": [str(count), str(rate), "1.0"],
        "launcher": "python",
        "nproc_per_node": 1,
        "checkpoint": NO_CHECKPOINTS,
    }
    response = http.post("/v1/jobs", json=spec)
    response.raise_for_status()
    job_id = response.json()["id"]
    latencies: list[float] = []
    early = 0
    parser = SseParser()
    timeout = httpx.Timeout(30, read=60)
    with http.stream("GET", f"/v1/jobs/{job_id}/events", timeout=timeout) as stream:
        stream.raise_for_status()
        opened = time.time()
        for line in stream.iter_lines():
            received = time.time()
            event = parser.feed(line)
            if event is None:
                continue
            data: dict[str, Any] = json.loads(event.data)
            if event.event == "metric" and data["name"] == "lat":
                if data["ts"] < opened:
                    early += 1
                else:
                    latencies.append(received - data["ts"])
            elif event.event == "state" and JobState(data["state"]).is_terminal():
                if data["state"] != JobState.SUCCEEDED:
                    raise RuntimeError(f"P4b job {job_id} ended {data}")
                break
    return latencies, early


MODES = {
    "written": ("P4a′", "each line written before report() returns (the default)"),
    "queued": ("P4a″", "lines queued, written by the SDK's thread every 0.05 s (queue_reports)"),
    "plain": (
        "P4a‴",
        "the same line appended to the events file by the program itself (json.dumps + one "
        "unbuffered write, no SDK): what any script pays to write each line at once",
    ),
}


def reporting_cost(run: TrainingRun, mode: str, phase_steps: int) -> Result:
    """Each `mode` phase's step rate ÷ the mean rate of the off phases either side of it."""
    flanked = [
        (on, (before.rate + after.rate) / 2)
        for before, on, after in zip(run.phases, run.phases[1:], run.phases[2:], strict=False)
        if on.mode == mode and before.mode == after.mode == "off"
    ]
    ratios = [on.rate / off_rate for on, off_rate in flanked]
    ratio = median(ratios)
    on_rate = median([on.rate for on, _ in flanked])
    on_points = METRICS_PER_STEP * on_rate
    report_share = sum(on.report_s for on, _ in flanked) / sum(on.seconds for on, _ in flanked)
    row_id, what = MODES[mode]
    goal_holds = ratio >= 0.99 and on_points >= 5000
    return Result(
        row_id,
        f"step rate with reporting on ÷ off, same process, alternating phases: {what}",
        f"{ratio:.3f} (median of {len(ratios)} phases, range {min(ratios):.3f}–"
        f"{max(ratios):.3f}; {on_rate:.0f} vs {median([off for _, off in flanked]):.0f} "
        f"steps/s, {on_points:,.0f} points/s while on; reporting itself "
        f"{100 * report_share:.2f} % of the step time)",
        "report" if mode == "plain" else "≥ 0.99 at ≥ 5,000 points/s",
        None if mode == "plain" else goal_holds,
        f"phases of {phase_steps} steps cycling {', '.join(CYCLE)}; each on phase ÷ the mean "
        f"of the off phases either side; 1 rank, width {ALTERNATING_WIDTH}; 2 cores shared "
        "with the worker, API, Redis and this script",
    )


def check_all_stored(runs: list[TrainingRun]) -> None:
    for r in runs:
        if r.points != r.written:
            raise RuntimeError(f"P4a: rank 0 wrote {r.written} points, the API has {r.points}")


def run(sustained_rounds: int = 2, rounds: int = 30, phase_steps: int = 100) -> list[Result]:
    """`rounds` cycles of CYCLE: that many on phases for each way of reporting."""
    with running_stack() as stack, stack.client() as http:
        train_code = upload_code(http, "train.py", TRAIN_SOURCE)
        lines_code = upload_code(http, "lines.py", SSE_SOURCE)
        sustained = [
            run_training(http, stack, train_code, steps=2000, width=SUSTAINED_WIDTH)
            for _ in range(sustained_rounds)
        ]
        alternating = run_training(
            http,
            stack,
            train_code,
            steps=(len(CYCLE) * rounds + 1) * phase_steps,  # ends with an off phase
            width=ALTERNATING_WIDTH,
            phase_steps=phase_steps,
            poll_s=1.0,  # fewer of this script's own requests beside the rank
        )
        latencies, early = sse_latencies(http, lines_code, count=240, rate=20.0)
    check_all_stored([*sustained, alternating])
    rate = median([r.ingest_rate for r in sustained])
    offered = median(
        [
            METRICS_PER_STEP * sum(p.steps for p in r.phases) / sum(p.seconds for p in r.phases)
            for r in sustained
        ]
    )
    per_point_us = 1e6 * median([r.horse_cpu for r in sustained]) / rate
    p95 = percentile(latencies, 95) * 1000
    return [
        Result(
            "P4a",
            f"metric points/s stored from one job ({METRICS_PER_STEP} metrics a step, every "
            "step): points ÷ (all in the DB − first written)",
            f"{rate:,.0f} points/s (runs: "
            f"{', '.join(f'{r.ingest_rate:,.0f}' for r in sustained)}; offered {offered:,.0f}/s;"
            f" all in the DB {median([r.done_after_last_s for r in sustained]):.2f} s after "
            f"the last write; newest stored point at most "
            f"{max(r.max_age_s for r in sustained):.2f} s old while running; work horse "
            f"{100 * median([r.horse_cpu for r in sustained]):.0f} % of a core ≈ "
            f"{per_point_us:.0f} µs a point)",
            "≥ 5,000 points/s",
            rate >= 5000,
            f"{sustained_rounds} runs of 2,000 steps, 1 rank, width {SUSTAINED_WIDTH}, "
            f"{sustained[0].points:,} points a run counted back via GET …/metrics; "
            "polled every 0.1 s",
        ),
        *(reporting_cost(alternating, mode, phase_steps) for mode in MODES),
        Result(
            "P4b",
            "rank-0 write (line ts) → SSE client receipt, GET /v1/jobs/{id}/events, 20 lines/s",
            f"p95 {p95:.0f} ms (p50 {1000 * percentile(latencies, 50):.0f} ms, max "
            f"{1000 * max(latencies):.0f} ms, {len(latencies)} points)",
            "p95 ≤ 250 ms",
            p95 <= 250 and len(latencies) >= 200,
            f"same clock; worker poll 0.1 s, SSE poll 0.05 s; {early} points written "
            "before the stream opened left out",
        ),
    ]
