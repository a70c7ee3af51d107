"""Launch style: a legacy `python -m torch.distributed.launch` script that takes
`--local_rank` on its command line, and reports without the Launchbay SDK.

Set `pass_local_rank_arg: true` and the worker gives each rank `--local-rank=<n>` (the
spelling of torch >= 2.0; older launchers wrote `--local_rank`, so accept both). RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT still come from the environment (init_method
"env://"). Rank 0 appends JSON lines to $LAUNCHBAY_EVENTS_FILE itself.

Its spec is `train_local_rank_arg.yaml`, beside it, which says how to run it:
`launchbay run -f train_local_rank_arg.yaml -- python train_local_rank_arg.py`.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def report_event(event: dict) -> None:
    """Append one line to the events file: one write() of a whole line, rank 0 only."""
    path = os.environ.get("LAUNCHBAY_EVENTS_FILE")
    if not path:  # not run by Launchbay
        return
    with open(path, "a", encoding="utf-8") as events:
        events.write(json.dumps({**event, "ts": time.time()}) + "\n")


def save_checkpoint(state: dict, name: str) -> str:
    """Write the file completely (temp name, fsync, rename), only then announce it."""
    directory = os.environ.get("LAUNCHBAY_CHECKPOINT_DIR", "checkpoints")
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, name)
    temp = os.path.join(directory, f".{name}.tmp")
    with open(temp, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, final)
    return name  # relative to LAUNCHBAY_CHECKPOINT_DIR, as the events line wants it


def main() -> None:
    parser = argparse.ArgumentParser()
    # Both spellings, one destination; the env is the fallback for a torchrun-style start.
    parser.add_argument(
        "--local_rank",
        "--local-rank",
        dest="local_rank",
        type=int,
        default=int(os.environ.get("LOCAL_RANK", "0")),
    )
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(args.local_rank)
    device = torch.device("cuda", args.local_rank) if backend == "nccl" else torch.device("cpu")
    dist.init_process_group(backend=backend, init_method="env://")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        print(f"rank {rank} of {world}: --local_rank={args.local_rank}", flush=True)
        torch.manual_seed(0)
        net = nn.Linear(8, 1).to(device)
        model = DistributedDataParallel(
            net, device_ids=[args.local_rank] if device.type == "cuda" else None
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.Generator().manual_seed(1000 + rank)
        weights = torch.linspace(-1, 1, 8)

        for step in range(1, args.steps + 1):
            x = torch.randn(32, 8, generator=data)
            y = (x @ weights + 0.5).unsqueeze(1)
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)  # every rank joins; rank 0 reports the average
            if rank == 0:
                metrics = {"loss": mean.item() / world}
                report_event({"type": "metric", "step": step, "epoch": 1, "metrics": metrics})

        if rank == 0:
            # The plain module's state_dict (no "module." prefix) loads without DDP.
            state = {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
            path = save_checkpoint(state, f"step-{step:06d}.pt")
            report_event(
                {"type": "checkpoint", "path": path, "step": step, "epoch": 1, "metrics": metrics}
            )
        dist.barrier()
        print(f"rank {rank} done", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
