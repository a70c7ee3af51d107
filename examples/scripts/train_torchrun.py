"""Launch style: torchrun, with the Launchbay SDK (the recommended way).

The worker starts one process per rank with torchrun, which sets RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT; `lb.distributed()` joins the process group from
them (gloo on CPU, nccl on GPUs), and `lb.report` / `lb.save_checkpoint` write rank 0's
events file.

Its spec is `train_torchrun.yaml`, beside it, which says how to run it:
`launchbay run -f train_torchrun.yaml -- python train_torchrun.py`.
"""

import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn

from jobs import runtime as lb


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    with lb.distributed() as ctx:  # tears the process group down, also on error
        print(
            f"rank {ctx.rank} of {ctx.world_size} (LOCAL_RANK={os.environ.get('LOCAL_RANK')}) "
            f"on {ctx.device} with {ctx.backend}",
            flush=True,
        )
        lb.seed_everything(0)
        model = lb.prepare_model(nn.Linear(8, 1), ctx)  # DDP when there are several ranks
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        data = torch.Generator().manual_seed(1000 + ctx.rank)  # each rank its own batches
        weights = torch.linspace(-1, 1, 8)

        loss = torch.tensor(0.0)
        for step in range(1, args.steps + 1):
            x = torch.randn(32, 8, generator=data)
            y = (x @ weights + 0.5).unsqueeze(1)
            loss = F.mse_loss(model(x.to(ctx.device)), y.to(ctx.device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            # Every rank calls reduce_mean (a collective); only rank 0 writes the line.
            lb.report(step, epoch=1, total_steps=args.steps, loss=lb.reduce_mean(loss))

        final_loss = lb.reduce_mean(loss)
        lb.save_checkpoint(model, optimizer, step=args.steps, epoch=1, metrics={"loss": final_loss})
        lb.barrier()
        print(f"rank {ctx.rank} done, loss {final_loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
