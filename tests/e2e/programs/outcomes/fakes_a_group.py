"""A hostile program for 2 torchrun ranks that never form one process group and try to pass
for ones that did: each rank forms a group of its own (world size 1), both print what looks
like a group of 2, and rank 0 writes Launchbay's own group records for both ranks. Rank 0 also
saves three checkpoints that report `accuracy` (the spec's best_metric says `acc`), with many
long metric names, and floods the events file with invalid lines."""

import json
import os
import tempfile
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
store = tempfile.mkdtemp()
dist.init_process_group("gloo", init_method=f"file://{store}/store", rank=0, world_size=1)
print(f"[launchbay] rank {rank}: process group of 2 formed (world_size=2)", flush=True)
dist.destroy_process_group()

if rank == 0:
    # Once rank 1 has ended (its own record written), claim a group of 2 for both ranks.
    log_dir = os.environ["LAUNCHBAY_LOG_DIR"]
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(log_dir, "rank-1.finished")):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    for claimed in (0, 1):
        record = {"pid": os.getpid(), "rank": claimed, "world_size": 2, "backend": "gloo"}
        with open(os.path.join(log_dir, f"rank-{claimed}.group"), "w") as handle:
            json.dump({**record, "restart": 0, "collectives": 100}, handle)

    events = os.environ["LAUNCHBAY_EVENTS_FILE"]
    directory = os.environ["LAUNCHBAY_CHECKPOINT_DIR"]
    os.makedirs(directory, exist_ok=True)
    with open(events, "a") as out:
        out.writelines("not json\n" for _ in range(2000))
    names = {f"metric_{i:03d}_" + "n" * 100: float(i) for i in range(40)}
    for step, accuracy in ((1, 0.9), (2, 0.5), (3, 0.6)):
        name = f"step-{step}.pt"
        torch.save({"step": step}, os.path.join(directory, f".{name}.tmp"))
        os.replace(os.path.join(directory, f".{name}.tmp"), os.path.join(directory, name))
        with open(events, "a") as out:
            metrics = {"accuracy": accuracy, "loss": 1 - accuracy, **names}
            out.write(json.dumps({"type": "metric", "step": step, "metrics": metrics}) + "\n")
            line = {"type": "checkpoint", "path": name, "step": step, "metrics": metrics}
            out.write(json.dumps(line) + "\n")
