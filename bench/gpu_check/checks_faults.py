"""The checks of jobs that go wrong: a real CUDA out-of-memory, the cancel of a running job
(nothing of it left holding the GPU), and a hang (every rank's stack recorded)."""

import re
import time

from bench.gpu_check.report import Row, excerpt, not_run, verdict
from bench.gpu_check.session import Session, nvidia_smi
from devstack.procs import job_processes

HANG_TIMEOUT_S = 10


def check_cuda_oom(session: Session) -> Row:
    """A rank that fills its GPU until an allocation fails: the job ends failed, `oom`."""
    if not session.cuda:
        return not_run("cuda_oom", "needs CUDA: this run is --cpu")
    job = session.run(session.program_spec("gpu-check-oom", "cuda_oom.py", nproc_per_node=1))
    lines = session.log_lines(job["id"])
    held = [float(m.group(1)) for line in lines if (m := re.search(r"holding (\d+) GiB", line))]
    ok = job["state"] == "failed" and job.get("exit_reason") == "oom"
    detail = f"{session.outcome(job)}\n{excerpt(lines, 'holding', 1)}\n"
    detail += excerpt(lines, "OutOfMemoryError", 2)
    return verdict("cuda_oom", ok, max(held, default=None), "GiB held", detail.strip())


def gpu_pids() -> set[int]:
    """The processes nvidia-smi lists as using a GPU."""
    return {int(row[0]) for row in nvidia_smi("--query-compute-apps=pid") if row[0].isdigit()}


def check_cancel(session: Session) -> Row:
    """Cancel a job while it trains: it is `cancelled` within the grace + 2 s, and no process of
    it is left (on CUDA: none that nvidia-smi lists as holding the GPU)."""
    grace = float(session.stack.env()["LAUNCHBAY_CANCEL_GRACE_S"])
    job_id = session.submit(session.program_spec("gpu-check-cancel", "spin.py"))
    deadline = time.monotonic() + 120
    while not session.metrics(job_id) and time.monotonic() < deadline:
        if session.job(job_id)["state"] not in {"queued", "starting", "running"}:
            break
        time.sleep(0.2)
    ranks = {p.pid for p in job_processes(job_id)}
    on_gpu = gpu_pids() & ranks if session.cuda else set()
    asked = time.monotonic()
    session.http.post(f"/v1/jobs/{job_id}/cancel").raise_for_status()
    job = session.wait_until(job_id, {"cancelled"}, timeout_s=grace + 30)
    took = time.monotonic() - asked
    left = [p.pid for p in job_processes(job_id)]
    still_on_gpu = gpu_pids() & ranks if session.cuda else set()
    ok = job["state"] == "cancelled" and took <= grace + 2 and not left and not still_on_gpu
    if session.cuda:
        ok = ok and bool(on_gpu)  # nvidia-smi saw the ranks while they ran: the check can fail
    detail = (
        f"{session.outcome(job)} {took:.1f} s after the cancel (grace {grace:g} s); processes of "
        f"the job before {sorted(ranks)}, after {left}"
    )
    if session.cuda:
        detail += f"; on the GPU (nvidia-smi) before {sorted(on_gpu)}, after {sorted(still_on_gpu)}"
    return verdict("cancel", ok, round(took, 2), "s", detail)


def check_hang(session: Session) -> Row:
    """A job that stops making progress (a rank asleep before an all_reduce the others wait in;
    with one GPU, a rank waiting on a GPU kernel) ends `hang` with every rank's stack."""
    n = session.target.nproc
    spec = session.program_spec("gpu-check-hang", "stuck.py", hang_timeout_s=HANG_TIMEOUT_S)
    started = time.monotonic()
    job = session.run(spec, timeout_s=HANG_TIMEOUT_S + 120)
    took = time.monotonic() - started
    stacks = session.http.get(f"/v1/jobs/{job['id']}/stacks").json().get("items", [])
    by_rank = {s["rank"]: s["stack"] for s in stacks if s.get("reason") == "hang"}
    waiting = "synchronize" if n == 1 else "all_reduce"
    ok = (
        job["state"] == "failed"
        and job.get("exit_reason") == "hang"
        and sorted(by_rank) == list(range(n))
        and waiting in by_rank.get(0, "")
    )
    recorder = [
        line for s in by_rank.values() for line in s.splitlines() if "flight recorder" in line
    ]
    how = "rank waits on a GPU kernel" if n == 1 else f"rank {n - 1} sleeps before all_reduce"
    detail = (
        f"{how}; {session.outcome(job)}; stacks of ranks {sorted(by_rank)}; NCCL flight recorder: "
        f"{recorder[0] if recorder else 'no dump written'}\nrank 0's stack:\n"
        + "\n".join(by_rank.get(0, "").splitlines()[:8])
    )
    return verdict("hang", ok, round(took, 1), "s to the end", detail)
