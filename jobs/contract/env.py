"""The environment variable names the worker sets for every rank (README, "Inside the ranks";
docs/training-scripts.md). `worker.launch` sets them, `jobs.runtime.env` reads them. Below them,
those between the supervisor, the launcher and the rank entry (`worker/lifeline.py`,
`worker/rank_main.py`, which keep copies of their own: they import nothing of Launchbay)."""

JOB_ID = "LAUNCHBAY_JOB_ID"
ATTEMPT = "LAUNCHBAY_ATTEMPT"
EVENTS_FILE = "LAUNCHBAY_EVENTS_FILE"
CHECKPOINT_DIR = "LAUNCHBAY_CHECKPOINT_DIR"
RESUME_FROM = "LAUNCHBAY_RESUME_FROM"
CONFIG = "LAUNCHBAY_CONFIG"
AMP = "LAUNCHBAY_AMP"
DEVICE = "LAUNCHBAY_DEVICE"
BACKEND = "LAUNCHBAY_BACKEND"
CHECKPOINT = "LAUNCHBAY_CHECKPOINT"
COLLECTIVE_TIMEOUT_S = "LAUNCHBAY_COLLECTIVE_TIMEOUT_S"
# The attempt's log directory: each rank's log and error record (worker/rank_main.py).
LOG_DIR = "LAUNCHBAY_LOG_DIR"
# Files the job writes here are kept as its artifacts (GET /v1/jobs/{id}/artifacts).
OUTPUT_DIR = "LAUNCHBAY_OUTPUT_DIR"
# Which node of a multi-node job the rank runs on.
NODE = "LAUNCHBAY_NODE"
# The CPU slots a job was given on a worker without GPUs (`cpu:0,cpu:1`), under the dispatcher;
# its processes are pinned to the matching cores.
CPU_SLOTS = "LAUNCHBAY_CPU_SLOTS"
# The spec's `capture` (`auto` or `off`): worker/rank_main.py starts jobs/capture under `auto`.
CAPTURE = "LAUNCHBAY_CAPTURE"
# How many TensorBoard scalars capture may add to the job's metrics (the worker's setting).
TENSORBOARD_MAX_POINTS = "LAUNCHBAY_TENSORBOARD_MAX_POINTS"

# Set by the supervisor for the launcher: "<count>:<path>", the cgroup hierarchies it must be in
# before it runs anything (`worker.cgroups`; `worker/lifeline.py` waits, then drops it).
CGROUP = "LAUNCHBAY_CGROUP"
# Set by the supervisor for the launcher: the cores to pin it to (`0,1`), when its devices are CPU
# slots (`worker.devices`); `worker/lifeline.py` pins them, then drops it.
CPU_AFFINITY = "LAUNCHBAY_CPU_AFFINITY"
# Set by `worker/lifeline.py` for the ranks: the launcher's PID, which `worker/rank_main.py` dies
# with.
LAUNCHER_PID = "LAUNCHBAY_LAUNCHER_PID"
