"""Rank 0 reports step 1 in each run of the ranks; rank 1 fails the first run, so torchrun
starts both again (an elastic restart) and step 1 is reported a second time."""

import json
import os
import sys
import time

rank = int(os.environ["RANK"])
run = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
if run:
    time.sleep(0.5)  # a real rank takes seconds to import torch before its first line
print(f"rank {rank} run {run}", flush=True)
time.sleep(0.3)  # the worker stores that line, and its next read waits (STORE_EVERY_S)
if rank == 0:
    with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a") as events:
        events.write(json.dumps({"type": "metric", "step": 1, "metrics": {"run": run}}) + "\n")
if rank == 1 and run == 0:
    time.sleep(0.1)
    sys.exit(3)
time.sleep(0.5)
