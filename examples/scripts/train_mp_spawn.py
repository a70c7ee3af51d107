"""Launch style: one process that starts its own ranks with torch.multiprocessing.spawn.

With `launcher: python` the worker runs this file as a single process and sets
MASTER_ADDR, MASTER_PORT (a free port) and WORLD_SIZE (= nproc_per_node); the script
spawns WORLD_SIZE ranks and each joins the group with its own rank. Nothing else sets
RANK or LOCAL_RANK here: mp.spawn hands each child its index. Rank 0 appends JSON lines
to $LAUNCHBAY_EVENTS_FILE. Each spawned rank's output is its own log in Launchbay (the
process index mp.spawn gives it is its rank).

Its spec is `train_mp_spawn.yaml`, beside it, which says how to run it:
`launchbay run -f train_mp_spawn.yaml -- python train_mp_spawn.py`.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def report_event(event: dict) -> None:
    path = os.environ.get("LAUNCHBAY_EVENTS_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as events:
            events.write(json.dumps({**event, "ts": time.time()}) + "\n")


def save_checkpoint(state: dict, name: str) -> str:
    directory = os.environ.get("LAUNCHBAY_CHECKPOINT_DIR", "checkpoints")
    os.makedirs(directory, exist_ok=True)
    temp = os.path.join(directory, f".{name}.tmp")
    with open(temp, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, os.path.join(directory, name))
    return name


def train(rank: int, world_size: int, steps: int) -> None:
    """One rank; `rank` is the index mp.spawn passes first."""
    # init_method "env://" reads MASTER_ADDR and MASTER_PORT, set by Launchbay.
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        print(f"rank {rank} of {world_size} (pid {os.getpid()})", flush=True)
        torch.manual_seed(0)
        net = nn.Linear(8, 1)
        model = DistributedDataParallel(net)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.Generator().manual_seed(1000 + rank)
        weights = torch.linspace(-1, 1, 8)
        metrics: dict[str, float] = {}
        for step in range(1, steps + 1):
            x = torch.randn(32, 8, generator=data)
            loss = F.mse_loss(model(x), (x @ weights + 0.5).unsqueeze(1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            metrics = {"loss": mean.item() / world_size}
            if rank == 0:
                report_event({"type": "metric", "step": step, "epoch": 1, "metrics": metrics})
        if rank == 0:
            state = {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "step": steps}
            path = save_checkpoint(state, f"step-{steps:06d}.pt")
            report_event(
                {"type": "checkpoint", "path": path, "step": steps, "epoch": 1, "metrics": metrics}
            )
        dist.barrier()
        print(f"rank {rank} done", flush=True)
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    # Defaults for a plain local `python train_mp_spawn.py`.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    world_size = int(os.environ.get("WORLD_SIZE", "2"))
    print(
        f"spawning {world_size} ranks, rendezvous at "
        f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        flush=True,
    )
    # join=True: a rank that raises makes spawn raise here, so the job fails as it should.
    mp.spawn(train, args=(world_size, args.steps), nprocs=world_size, join=True)


if __name__ == "__main__":  # required: spawn re-imports this file in every child
    main()
