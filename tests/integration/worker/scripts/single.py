"""The `python` launcher's single process: reports what it was given and one metric."""

import json
import os
import sys

keys = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LAUNCHBAY_JOB_ID", "OMP_NUM_THREADS")
print("env " + json.dumps({k: os.environ.get(k) for k in keys}))
print("argv " + json.dumps(sys.argv[1:]))
print("cwd " + os.getcwd())
with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a") as events:
    events.write(json.dumps({"type": "metric", "step": 1, "metrics": {"acc": 0.5}}) + "\n")
if "--fail" in sys.argv:
    raise ValueError("single process failed on purpose")
