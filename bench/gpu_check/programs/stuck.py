"""Stop making progress the way a stuck job does (a GPU check's program, for hang detection):
after one metric line,

- with several ranks, the last rank sleeps before an all_reduce that the others enter and wait
  in (NCCL on CUDA, gloo without);
- with one rank on CUDA, the rank waits on a GPU kernel that runs for an hour.
"""

import json
import os
import time

import torch
import torch.distributed as dist

cuda = torch.cuda.is_available()
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
if rank == 0:
    with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a") as events:
        events.write(json.dumps({"type": "metric", "step": 1, "metrics": {"started": 1.0}}) + "\n")
if world > 1:
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    tensor = torch.ones(1024, device=device)
    dist.all_reduce(tensor)  # every rank once: the group works
    print(f"rank {rank}: group of {world} formed", flush=True)
    if rank == world - 1:
        time.sleep(3600)
    dist.all_reduce(tensor)
    print(f"rank {rank}: {tensor[0].item()}", flush=True)  # waits for the GPU with NCCL
else:
    print("waiting on a GPU kernel that runs for an hour", flush=True)
    torch.cuda._sleep(3600 * 2 * 10**9)  # about an hour of GPU clock cycles
    torch.cuda.synchronize()
