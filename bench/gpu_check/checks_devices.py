"""The checks of a worker's devices: what its CUDA probe found (GPU UUIDs, against nvidia-smi),
MIG, its refusal to start where it should have GPUs but CUDA is unusable, and the sampler of
the GPUs a job holds (its readings, and the system metrics the jobs of the check stored)."""

import subprocess
import time

from redis import Redis

from bench.gpu_check.report import Row, excerpt, failed, not_run, passed, verdict
from bench.gpu_check.session import Session, nvidia_smi
from devstack.stack import LAUNCHBAY
from service.worker_records import load_worker_records
from worker.gpu_sampler import SmiReader, open_gpu_reader

CUDA_ONLY = "needs CUDA: this run is --cpu"
# A GPU no machine has: given to a worker, CUDA sees no device at all.
NO_SUCH_GPU = "GPU-00000000-0000-0000-0000-000000000000"


def check_device_probe(session: Session) -> Row:
    """The worker's probe found every GPU, with the UUIDs nvidia-smi gives them."""
    if not session.cuda:
        return not_run("device_probe", CUDA_ONLY)
    records = load_worker_records(Redis.from_url(session.redis_url))
    probed = sorted(u.removeprefix("GPU-") for r in records for u in r.gpu_uuids)
    listed = sorted(row[0].removeprefix("GPU-") for row in nvidia_smi("--query-gpu=uuid"))
    devices = [d for r in records for d in r.devices]
    worker_log = session.stack.worker_logs().splitlines()
    detail = (
        f"worker devices {devices}; probe UUIDs {probed}; nvidia-smi UUIDs {listed}\n"
        + excerpt(worker_log, " owns ", 1)
    )
    ok = bool(probed) and probed == listed and len(devices) == session.target.nproc
    return verdict("device_probe", ok, len(probed), "GPUs", detail)


def check_mig(session: Session) -> Row:
    """What MIG mode the GPUs are in, as nvidia-smi says, and the devices it lists."""
    if not session.cuda:
        return not_run("mig", CUDA_ONLY)
    modes = nvidia_smi("--query-gpu=index,mig.mode.current")
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    mig_devices = [line.strip() for line in listing.stdout.splitlines() if "MIG" in line]
    enabled = [m for m in modes if m[1:] == ["Enabled"]]
    detail = f"mig.mode.current per GPU: {modes}; MIG devices listed: {len(mig_devices)}\n"
    detail += listing.stdout.strip()
    # With MIG on, a worker owns one instance (--gpus MIG-<uuid>); its GPUs must list them.
    ok = bool(modes) and (not enabled or bool(mig_devices))
    value = "enabled" if enabled else "disabled or not supported"
    return verdict("mig", ok, value, "", detail)


def check_refusal(session: Session) -> Row:
    """`launchbay worker` refuses to start where it should have GPUs but CUDA is unusable:
    on CPU, `--gpus 0` with this CPU-only torch build; on a GPU host, `--gpus` naming a GPU
    that is not there (CUDA then sees none)."""
    gpu = NO_SUCH_GPU if session.cuda else "0"
    env = session.stack.env()
    for secret in ("LAUNCHBAY_ADMIN_TOKEN", "LAUNCHBAY_TOKEN"):
        env.pop(secret, None)
    argv = [LAUNCHBAY, "worker", "--queue", "gpu-check-refusal", "--gpus", gpu, "--burst"]
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    took = time.monotonic() - started
    said = (done.stdout + done.stderr).strip().splitlines()
    message = excerpt(said, "CUDA is not usable", 1)
    want = "build without CUDA" if not session.cuda else "CUDA is not usable"
    ok = done.returncode != 0 and want in message
    detail = f"`launchbay worker --gpus {gpu}` exited {done.returncode}: {message or said[-3:]}"
    return verdict("worker_refusal", ok, round(took, 1), "s", detail)


def check_machine(session: Session, machine: str) -> Row:
    return passed("machine", session.target.nproc, "GPUs" if session.cuda else "CPU ranks", machine)


def check_gpu_sampler(session: Session) -> Row:
    """The worker's GPU sampler, run here on the worker's GPUs: every GPU read (utilisation,
    memory, power; memory within 10 % or 1 GiB of what nvidia-smi says at the same moment);
    and the jobs the check ran before have their readings stored as system metrics
    (`system/gpu0/utilization_percent`: the stack samples every second)."""
    if not session.cuda:
        return not_run("gpu_sampler", CUDA_ONLY)
    records = load_worker_records(Redis.from_url(session.redis_url))
    gpus = [d for r in records for d in r.devices]
    reader = open_gpu_reader(gpus)
    if reader is None:
        return failed("gpu_sampler", f"neither NVML nor nvidia-smi answers for GPUs {gpus}")
    try:
        samples = reader.read()
    finally:
        reader.close()
    smi = SmiReader("nvidia-smi", gpus).read()
    complete = all(s.utilization_percent is not None and s.memory_used_bytes for s in samples)
    agree = all(
        a.memory_used_bytes is not None
        and b.memory_used_bytes is not None
        and abs(a.memory_used_bytes - b.memory_used_bytes)
        <= max(1 << 30, 0.1 * b.memory_used_bytes)
        for a, b in zip(samples, smi, strict=True)
    )
    ended = session.http.get("/v1/jobs", params={"state": "succeeded", "limit": 1}).json()
    stored = 0
    for job in ended["items"]:
        page = session.http.get(
            f"/v1/jobs/{job['id']}/metrics", params={"name": "system/gpu0/utilization_percent"}
        ).json()
        stored = len(page["items"])
    detail = (
        f"reader {reader.name} on GPUs {gpus}: {samples}; nvidia-smi: {smi}; "
        f"{stored} utilisation readings stored for the last job that succeeded"
    )
    return verdict("gpu_sampler", complete and agree and stored > 0, stored, "readings", detail)
