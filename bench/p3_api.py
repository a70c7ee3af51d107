"""P3: `GET /v1/jobs/{id}` requests/s ÷ `GET /v1/health` on the same server, and the job
route's p50/p99 latency, at 64 connections; `POST /v1/jobs` requests/s (enqueue included).

The load is wrk's (closed loop: every connection sends its next request as soon as the
answer is in). Health and job runs alternate, same duration, connections and headers (a
user's bearer token, which health ignores; the job is that user's). The server is
`launchbay api`: ONE uvicorn process (one event loop; sync routes and dependencies run in
its thread pool), on SQLite.
The posted jobs go to a queue that no worker reads.

A run where requests time out (the server stopped answering) is reported as such; before
the next run the server is given time to answer again, and a stuck route is not run twice.
"""

import json
import time

import httpx

from bench.common import Result, WrkResult, median, run_wrk, running_stack

CONNECTIONS = 64
# Fewer connections than the API's 40 worker threads: a second look.
FEW_CONNECTIONS = 15
UNREAD_QUEUE = "bench-p3-unread"
SPEC = {
    "name": "p3-post",
    "recipe": "synthetic",
    "queue": UNREAD_QUEUE,
    "nproc_per_node": 1,
    "config": {"epochs": 1},
}


def post_lua(spec: dict[str, object]) -> str:
    body = json.dumps(json.dumps(spec))  # a JSON string literal is a valid Lua one here
    return (
        'wrk.method = "POST"\n'
        f"wrk.body = {body}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )


def describe(r: WrkResult) -> str:
    if r.requests == 0:
        return f"0 answers in {r.seconds:.0f} s ({r.timeouts} timed out)"
    text = f"{r.rps:.0f} req/s, p50 {r.p50_ms:.1f} ms, p99 {r.p99_ms:.1f} ms"
    if r.errors or r.timeouts:
        text += f", {r.errors} errors, {r.timeouts} timeouts"
    return text


def wait_until_answering(http: httpx.Client, url: str, timeout: float = 60) -> float:
    """Seconds until `url` answers 200 within 2 s again (after a run that left it stuck)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if http.get(url, timeout=2).status_code == 200:
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer again within {timeout:.0f} s")


# long: one load-test session on one stack (warm-up, alternating runs, few connections,
# POST), then the four rows read from its numbers
def run(rounds: int = 2, seconds: float = 10.0, short_s: float = 5.0) -> list[Result]:
    health: list[WrkResult] = []
    job: list[WrkResult] = []
    recovery: list[float] = []
    # No submission rate limit (LAUNCHBAY_SUBMISSIONS_PER_MINUTE=0): P3d measures the route.
    with (
        running_stack(workers=0, LAUNCHBAY_SUBMISSIONS_PER_MINUTE="0") as stack,
        stack.client() as http,
    ):
        made = http.post("/v1/tokens", json={"name": "p3-user", "role": "user"})
        made.raise_for_status()
        auth = {"Authorization": f"Bearer {made.json()['token']}"}
        response = http.post("/v1/jobs", json={**SPEC, "name": "p3-get"}, headers=auth)
        response.raise_for_status()
        health_url = f"{stack.url}/v1/health"
        job_url = f"{stack.url}/v1/jobs/{response.json()['id']}"

        def load(url: str, connections: int, duration: float, lua: str = "") -> WrkResult:
            result = run_wrk(url, seconds=duration, connections=connections, headers=auth, lua=lua)
            if result.requests == 0 or result.timeouts:
                recovery.append(wait_until_answering(http, job_url))
            return result

        for url in (health_url, job_url):  # warm-up, few connections
            load(url, 4, 2)
        for _ in range(rounds):
            health.append(load(health_url, CONNECTIONS, seconds))
            job.append(load(job_url, CONNECTIONS, seconds))
            if job[-1].requests == 0:
                break  # stuck: a second run would only be stuck again
        few_health = load(health_url, FEW_CONNECTIONS, short_s)
        few_job = load(job_url, FEW_CONNECTIONS, short_s)
        post = load(f"{stack.url}/v1/jobs", CONNECTIONS, seconds, lua=post_lua(SPEC))
        posted = http.get("/v1/jobs", params={"limit": 1}).json()["total"] - 1
        api_log = (stack.root / "api.log").read_text(errors="replace")
    pool_timeouts = api_log.count("sqlalchemy.exc.TimeoutError: QueuePool limit")
    ratio = median([j.rps / h.rps for j, h in zip(job, health, strict=False)])
    stuck = any(r.failed for r in job)
    p99 = float("inf") if stuck else max(r.p99_ms for r in job)
    few_ratio = few_job.rps / few_health.rps
    setting = f"wrk -t1, {seconds:g} s runs alternating; 1 uvicorn process, SQLite"
    stuck_note = (
        f"; after a stuck run the job route answered again after "
        f"{', '.join(f'{s:.0f} s' for s in recovery)}; the API log has {pool_timeouts} "
        "'QueuePool limit ... reached' errors (500s after 30 s)"
        if recovery
        else ""
    )
    return [
        Result(
            "P3a",
            f"GET /v1/jobs/{{id}} req/s ÷ GET /v1/health req/s, same server, "
            f"{CONNECTIONS} connections",
            f"{ratio:.2f} (job: {'; '.join(describe(r) for r in job)} | "
            f"health: {'; '.join(describe(r) for r in health)})",
            "≥ 0.5",
            ratio >= 0.5 and not stuck,
            setting + stuck_note,
        ),
        Result(
            "P3b",
            f"GET /v1/jobs/{{id}} p99 latency at {CONNECTIONS} connections (worst run)",
            (
                "no p99: requests timed out (> 10 s)"
                if stuck
                else f"{p99:.1f} ms (p50 {median([r.p50_ms for r in job]):.1f} ms)"
            ),
            "< 50 ms",
            p99 < 50,
            setting,
        ),
        Result(
            "P3c",
            f"the same at {FEW_CONNECTIONS} connections (fewer than the API's 40 threads)",
            f"{few_ratio:.2f} (job: {describe(few_job)} | health: {describe(few_health)})",
            "report",
            None,
            f"wrk -t1, {short_s:g} s each",
        ),
        Result(
            "P3d",
            "POST /v1/jobs req/s, enqueue to Redis included (a queue no worker reads)",
            f"{describe(post)} ({posted} jobs stored)",
            "report",
            None,
            f"wrk -t1 -c{CONNECTIONS}, {seconds:g} s; 1 uvicorn process, SQLite; "
            "LAUNCHBAY_SUBMISSIONS_PER_MINUTE=0 (no rate limit)",
        ),
    ]
