"""A DDP-style program on several nodes that keeps its checkpoints as
torch.distributed.checkpoint folders: the state is the same on every rank, so rank 0 saves it
alone (`no_dist=True`) into a folder it renames into place and reports; a resumed attempt
loads the folder LAUNCHBAY_RESUME_FROM names on every rank (fetched to each node).

Attempt 1 saves step-1..step-3, then waits at a barrier every 0.2 s until a node is lost (and
gives up after two minutes); attempt 2 resumes, checks what it loaded, saves step-4 and ends.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} of world {dist.get_world_size()}", flush=True)
ckpt_dir = os.environ["LAUNCHBAY_CHECKPOINT_DIR"]
attempt = int(os.environ["LAUNCHBAY_ATTEMPT"])
model = torch.nn.Linear(8, 4)
start = 0
resume = os.environ.get("LAUNCHBAY_RESUME_FROM")
if resume:
    state = {"model": model.state_dict(), "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=resume, no_dist=True)
    model.load_state_dict(state["model"])
    start = int(state["step"])
    weight = model.weight.sum().item()
    print(f"rank {rank} resumed from {os.path.basename(resume)} at step {start} weight {weight}")

last = 3 if attempt == 1 else start + 1
for step in range(start + 1, last + 1):
    with torch.no_grad():
        model.weight.fill_(float(step))
    if rank == 0:
        metric = {"type": "metric", "step": step, "metrics": {"loss": 1 / step}}
        with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a") as events:
            events.write(json.dumps(metric) + "\n")
        name = f"step-{step}"
        staging = os.path.join(ckpt_dir, f".{name}.tmp")
        state = {"model": model.state_dict(), "step": torch.tensor(step)}
        dcp.save(state, checkpoint_id=staging, no_dist=True)
        os.rename(staging, os.path.join(ckpt_dir, name))
        line = {"type": "checkpoint", "path": name, "step": step, "metrics": {"loss": 1 / step}}
        with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a") as events:
            events.write(json.dumps(line) + "\n")
    dist.barrier()

if attempt == 1:
    print(f"rank {rank} saved step-3; waiting", flush=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.2)
        dist.barrier()  # fails once the other node is gone
    sys.exit(1)
dist.destroy_process_group()
