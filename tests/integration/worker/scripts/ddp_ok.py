"""Two ranks over gloo: an all_reduce, a few metrics from rank 0, one torch.save checkpoint,
and a few lines of the events file that break the format (they must be skipped, not fatal)."""

import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"hello from rank {rank} of {dist.get_world_size()} argv={sys.argv[1:]}")
print(f"rank {rank} warning on stderr", file=sys.stderr)
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
assert total.item() == 3.0, total
if rank == 0:
    events = open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a", buffering=1)
    for step in range(1, 6):
        line = {"type": "metric", "step": step, "epoch": 0, "metrics": {"loss": 1.0 / step}}
        if step == 2:
            line["ts"] = 1234.5
        events.write(json.dumps(line) + "\n")
    events.write("this is not json\n")
    events.write(json.dumps({"type": "metric", "step": "six", "metrics": {"loss": 1}}) + "\n")
    events.write('{"type": "metric", "step": 7, "metrics": {"loss": NaN}}\n')
    ckpt_dir = os.environ["LAUNCHBAY_CHECKPOINT_DIR"]
    temp = os.path.join(ckpt_dir, ".step-5.pt.tmp")
    torch.save({"weight": torch.arange(10.0), "step": 5}, temp)
    os.replace(temp, os.path.join(ckpt_dir, "step-5.pt"))
    events.write(
        json.dumps(
            {
                "type": "checkpoint",
                "path": "step-5.pt",
                "step": 5,
                "epoch": 0,
                "metrics": {"loss": 0.2},
            }
        )
        + "\n"
    )
    events.write(
        '{"type": "metric", "step": 6, "epoch": 0, "metrics": {"loss": 0.1}}'
    )  # no newline
    events.close()
dist.barrier()
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
