"""P9: the dispatcher (docs/scheduling.md).

- S1 decision time: the planner with 1,000 queued jobs (50 owners, 1 to 8 devices, some
  2-node, three priorities) and 100 simulated workers (8 devices each, most of them busy),
  p50/p99 over 200 decisions; and a whole pass (read the queue, reservations, usage and
  policies from SQLite and 100 worker records from Redis, decide, write) over 50 passes.
- S2 submission → first training step and launcher start on an idle worker, the dispatcher
  beside the RQ hand-over without it, and each ÷ bare RQ (P6): `bench.p9_dispatch_path`.
- S3 admission throughput: 3,000 queued jobs and 20 simulated one-slot workers (another
  process that ends at once every job it pops) so that the dispatcher alone is measured;
  beside it, jobs reaching running per second on 4 real workers on this 2-core machine.
- S4 fair share with real workers: owner A submits 40 no-op jobs, then B 10, on 2 one-slot
  workers; when B's first starts against A's 11th, each owner's share of the device-time
  while both wait, and Jain's index of the shares over the weights.
"""

import sys
import tempfile
from pathlib import Path

from bench import p9_dispatch_path
from bench.common import Result, percentile
from bench.p9_scheduling_simulated import decision_times, pass_times, simulated_throughput
from bench.p9_scheduling_stacks import fair_share, real_throughput
from devstack.services import private_redis


def run() -> list[Result]:
    results = []

    def add(result: Result) -> None:
        results.append(result)
        print(result.row(), file=sys.stderr, flush=True)  # as soon as measured

    root = Path(tempfile.mkdtemp(prefix="launchbay-bench-p9-"))
    root.chmod(0o711)
    add(decision_result())
    with private_redis() as redis_server:
        add(pass_result(root, redis_server.url(2)))
        add(throughput_result(root, redis_server.url(3), redis_server.url(4)))
        add(fair_share_result(root / "fair", redis_server.url(5)))
    for result in p9_dispatch_path.run():
        add(result)
    return results


def decision_result() -> Result:
    decide, cpu = decision_times()
    p50, p99 = 1000 * percentile(decide, 50), 1000 * percentile(decide, 99)
    cpu50, cpu99 = 1000 * percentile(cpu, 50), 1000 * percentile(cpu, 99)
    return Result(
        "P9a",
        "dispatch decision, 1,000 queued jobs, 100 workers (simulated capacity)",
        f"wall p50 {p50:.1f} ms, p99 {p99:.1f} ms; CPU p50 {cpu50:.1f} ms, p99 "
        f"{cpu99:.1f} ms ({len(decide)} decisions)",
        "p99 ≤ 50 ms",
        p99 <= 50,
        "the planner alone (service/scheduling/planner.py), 95 workers busy; "
        "CPU = this thread's time, what the wall clock is on an idle core",
    )


def pass_result(root: Path, redis_url: str) -> Result:
    first, passes = pass_times(root, redis_url)
    return Result(
        "P9b",
        "a whole dispatch pass, 1,000 queued jobs, 100 worker records (SQLite, Redis)",
        f"p50 {1000 * percentile(passes, 50):.0f} ms, p99 "
        f"{1000 * percentile(passes, 99):.0f} ms; first pass (writes 1,000 positions) "
        f"{1000 * first:.0f} ms",
        "reported",
        None,
        "read queue, reservations, usage, policies and workers; decide; fence and write",
    )


def throughput_result(root: Path, simulated_redis_url: str, real_redis_url: str) -> Result:
    simulated, passes = simulated_throughput(root, simulated_redis_url)
    cold = real_throughput(root / "real", real_redis_url)
    warm = real_throughput(root / "real-warm", real_redis_url, warm=True)
    p50, p99 = 1000 * percentile(passes, 50), 1000 * percentile(passes, 99)
    cpu = ", ".join(f"{role} {1000 * s:.0f} ms" for role, s in warm.cpu_per_job.items())
    return Result(
        "P9d",
        "admission throughput: 3,000 queued, 20 simulated one-slot workers; 40 jobs, 4 real ones",
        f"{simulated:.0f} admissions/s (passes p50 {p50:.0f} ms, p99 {p99:.0f} ms); "
        f"{warm.per_s:.1f} jobs/s reaching running on 4 real workers, warm "
        f"({cold.per_s:.1f}/s cold); CPU a warm job: {cpu}",
        "≥ 500/s simulated; ≥ 20/s real",
        simulated >= 500 and warm.per_s >= 20,
        "simulated workers (another process) end every job they pop at once, so the "
        "dispatcher alone is measured, woken as in the API; a real job runs `print('ok')` "
        "from uploaded code on `--slots 1` workers: warm, the default launcher once the "
        "workers' fork servers are up; cold, `launcher: python`; CPU: user and system time "
        "of each process, its reaped children with it (fork servers: their launchers and "
        "ranks), and of the machine",
    )


def fair_share_result(root: Path, redis_url: str) -> Result:
    fair = fair_share(root, redis_url)
    return Result(
        "P9e",
        "fair share: A submits 40 no-op jobs, then B 10, on 2 one-slot workers",
        f"B's first started {fair['b_first_s']:.1f} s after A's first, A's 11th at "
        f"{fair['a_11th_s']:.1f} s; shares while both waited A {fair['share_a']:.2f}, "
        f"B {fair['share_b']:.2f} over {fair['window_s']:.0f} s; Jain's index "
        f"{fair['jain']:.3f}",
        "B's first before A's 11th; each share within 10% of its weight (0.5)",
        bool(fair["b_before_a11"])
        and abs(fair["share_a"] - 0.5) <= 0.05
        and abs(fair["share_b"] - 0.5) <= 0.05,
        "equal weights; device-time from started_at to finished_at",
    )
