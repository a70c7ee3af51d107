"""torch.distributed.checkpoint as its users write it: every rank saves its part into a folder
(`dcp.save`), rank 0 renames the complete folder into place and reports it; a resumed
attempt loads the folder LAUNCHBAY_RESUME_FROM names (`dcp.load`).

Attempt 1 saves step-1..step-4 (loss 4, 1, 3, 2: the best is step-2) and fails; attempt 2
resumes from step-4 and saves step-5.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

LOSSES = {1: 4.0, 2: 1.0, 3: 3.0, 4: 2.0, 5: 0.5}

dist.init_process_group("gloo")
rank = dist.get_rank()
ckpt_dir = os.environ["LAUNCHBAY_CHECKPOINT_DIR"]
attempt = int(os.environ["LAUNCHBAY_ATTEMPT"])
model = torch.nn.Linear(4, 2)
start = 0
resume = os.environ.get("LAUNCHBAY_RESUME_FROM")
if resume:
    state = {"model": model.state_dict(), "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=resume)
    model.load_state_dict(state["model"])
    start = int(state["step"])
    weight = model.weight.sum().item()
    print(f"rank {rank} resumed from {os.path.basename(resume)} at step {start} weight {weight}")

for step in range(start + 1, (4 if attempt == 1 else 5) + 1):
    with torch.no_grad():
        model.weight.fill_(float(step))
    name = f"step-{step}"
    staging = os.path.join(ckpt_dir, f".{name}.tmp")
    dcp.save({"model": model.state_dict(), "step": torch.tensor(step)}, checkpoint_id=staging)
    dist.barrier()
    if rank == 0:
        os.rename(staging, os.path.join(ckpt_dir, name))
        line = {"type": "checkpoint", "path": name, "step": step, "metrics": {"loss": LOSSES[step]}}
        with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a") as events:
            events.write(json.dumps(line) + "\n")
    dist.barrier()

dist.destroy_process_group()
if attempt == 1:
    print(f"rank {rank} fails on purpose after step 4", flush=True)
    sys.exit(1)
