"""One attempt run start to end in this process, as a work horse runs it but without RQ and
without the worker's fork (`worker.tasks.run_job` takes the attempt in the worker first)."""

from jobs.states import AttemptRef
from worker.attempt import AttemptResult, run_taken, take_attempt
from worker.context import AttemptServices
from worker.prepare import CudaInfo


def run_attempt(
    services: AttemptServices,
    ref: AttemptRef,
    *,
    worker_name: str,
    cuda: CudaInfo | None = None,
) -> AttemptResult | None:
    """Take the attempt (join it as its node, for a multi-node job), run it to its end and
    record how it ended (`take_attempt`, then `run_taken`).

    Returns None, having done nothing, when the job is not `queued` at that attempt any more
    (cancelled while queued, or taken by another worker), or the node cannot join it.
    """
    taken = take_attempt(services, ref, worker_name=worker_name)
    if taken is None:
        return None
    return run_taken(services, taken, cuda=cuda)
