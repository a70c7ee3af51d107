"""At submission: could the live workers of the job's queue ever run it? (`check_worker_fit`)

A worker refuses a job whose `nproc_per_node` exceeds its devices (its GPUs, else its CPU
slots), `device: cuda` without a GPU, or `backend: nccl` without CUDA (`worker.prepare.
check_resources`): the job fails with `launch_error` seconds after it was accepted. With the
workers' records in Redis (`service.worker_records`, what GET /v1/workers lists), the API
says so at once:

- no live worker serves the queue: accepted, nothing said (workers may come: autoscaling);
- live workers serve it and none could ever run it: 422 `never_fits`, naming what they have,
  as the dispatcher answers a job more devices than any of its workers have;
- some could not for a reason the dispatcher does not weigh (a GPU job on a queue where
  some workers have none: the dispatcher counts devices, it does not tell GPUs from CPU
  slots), or none could but a damaged record may be a worker of the queue: accepted, with a
  warning on the job.

The records are written by the workers, so none is trusted to be well formed: a record that is
not JSON, not an object or not a worker record is "unknown" (it may serve the queue), and a
Redis that does not answer leaves the submission as it was (the executor then says so).
"""

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from jobs.spec import JobSpec
from service.errors import Unprocessable
from service.records.job_warnings import merge_warnings
from service.schemas import WorkerRecord

log = logging.getLogger("launchbay.api")

CPU_SLOT_PREFIX = "cpu:"
# Workers named in a message or in the 422's detail: a queue may have hundreds.
NAMED_WORKERS = 5
MAX_NAME_CHARS = 64


@dataclass
class LiveWorkers:
    """The live workers' records of one queue, and how many records could not be read."""

    records: list[WorkerRecord] = field(default_factory=list)
    unknown: int = 0


def read_live_workers(stored: Sequence[bytes | str], queue: str) -> LiveWorkers:
    """The records of the live workers that serve `queue`, from the `stored` records
    (`service.worker_records.stored_worker_records`); a damaged record counts as unknown
    unless it plainly names its queues and `queue` is not among them."""
    found = LiveWorkers()
    for raw in stored:
        try:
            record = json.loads(raw)
        except ValueError:
            found.unknown += 1
            continue
        try:
            worker = WorkerRecord.model_validate(record)
        except ValidationError:
            queues = record.get("queues") if isinstance(record, dict) else None
            if not (isinstance(queues, list) and queue not in queues):
                found.unknown += 1
            continue
        if queue in worker.queues:
            found.records.append(worker)
    return found


def why_unable(spec: JobSpec, worker: WorkerRecord) -> str | None:
    """Why `worker` could never run `spec` (as its `check_resources` would say), or None."""
    gpus = [d for d in worker.devices if not d.startswith(CPU_SLOT_PREFIX)]
    if spec.device == "cuda" and not gpus:
        return "no GPU (device: cuda)"
    if spec.backend == "nccl" and (not gpus or spec.device == "cpu"):
        return "no GPU for backend: nccl" if not gpus else "nccl needs CUDA, not device: cpu"
    if spec.nproc_per_node > len(worker.devices):
        kind = "GPU(s)" if gpus else "CPU slot(s)"
        return f"{len(worker.devices)} {kind} for nproc_per_node: {spec.nproc_per_node}"
    return None


def _named(workers: Sequence[tuple[WorkerRecord, str]]) -> str:
    said = [f"{w.name[:MAX_NAME_CHARS]} ({why})" for w, why in workers[:NAMED_WORKERS]]
    more = len(workers) - NAMED_WORKERS
    return ", ".join(said) + (f" and {more} more" if more > 0 else "")


def fit_warnings(spec: JobSpec, live: LiveWorkers) -> list[str]:
    """The warnings for the accepted job; Unprocessable (`never_fits`) when live workers of its
    queue are known, every record read, and none could ever run it."""
    unable = [(w, why) for w in live.records if (why := why_unable(spec, w)) is not None]
    if not unable:
        return []
    queue = spec.queue
    if len(unable) == len(live.records) and not live.unknown:
        raise Unprocessable(
            f"no live worker of queue '{queue}' could ever run this job: "
            f"{_named(unable)}; change the spec, or submit it to a queue whose workers can",
            code="never_fits",
            detail={
                "queue": queue,
                "workers": [
                    {"name": w.name[:MAX_NAME_CHARS], "devices": len(w.devices), "why": why}
                    for w, why in unable[:NAMED_WORKERS]
                ],
                "live_workers": len(live.records),
            },
        )
    if len(unable) == len(live.records):
        return [
            f"no live worker of queue '{queue}' is known to be able to run this job: "
            f"{_named(unable)}, and {live.unknown} worker record(s) could not be read; one of "
            "those named may take it and fail it with launch_error"
        ]
    # The dispatcher admits a job only where it has enough devices; it does not tell GPUs apart.
    unable = [(w, why) for w, why in unable if "nproc_per_node" not in why]
    if not unable:
        return []
    return [
        f"some live workers of queue '{queue}' could never run this job: {_named(unable)}; "
        "one of them may take it and fail it with launch_error"
    ]


def check_worker_fit(stored: Sequence[bytes | str] | None, spec: JobSpec) -> list[str]:
    """`fit_warnings` of the queue's live workers (bounded as a job's warnings are), from the
    `stored` records; none when Redis did not answer (`stored` None)."""
    if stored is None:
        return []
    return merge_warnings([], fit_warnings(spec, read_live_workers(stored, spec.queue)))
