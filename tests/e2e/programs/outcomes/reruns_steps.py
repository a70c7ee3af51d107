"""Reports steps 1 and 2 of `loss` in every run, each with values of its own: the first
attempt's first run fails (torchrun restarts it: max_restarts), its second fails too (the
job is retried: max_retries), and the second attempt saves a checkpoint that reports
`accuracy` (the spec's best_metric says `acc`)."""

import json
import os
import sys

import torch

attempt = int(os.environ["LAUNCHBAY_ATTEMPT"])
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
events = os.environ["LAUNCHBAY_EVENTS_FILE"]
with open(events, "a") as out:
    for step in (1, 2):
        loss = 10 * attempt + restart + step / 10
        out.write(json.dumps({"type": "metric", "step": step, "metrics": {"loss": loss}}) + "\n")
if attempt == 1:
    sys.exit(1)
directory = os.environ["LAUNCHBAY_CHECKPOINT_DIR"]
torch.save({"step": 2}, os.path.join(directory, ".last.pt"))
os.replace(os.path.join(directory, ".last.pt"), os.path.join(directory, "last.pt"))
with open(events, "a") as out:
    line = {"type": "checkpoint", "path": "last.pt", "step": 2, "metrics": {"accuracy": 0.5}}
    out.write(json.dumps(line) + "\n")
