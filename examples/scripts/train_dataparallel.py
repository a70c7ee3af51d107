"""Launch style: one process, nn.DataParallel.

DataParallel splits each batch over the visible GPUs inside one process (on CPU it simply
runs the wrapped module). Use `launcher: python` with `nproc_per_node: 1`: one process,
which uses every GPU the worker gives it. Reporting goes through the Launchbay SDK's
`report` and `save_checkpoint`, which work without any process group (this process is
rank 0).

Its spec is `train_dataparallel.yaml`, beside it, which says how to run it:
`launchbay run -f train_dataparallel.yaml -- python train_dataparallel.py`.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

from jobs import runtime as lb


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = nn.DataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    model.to(device)
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    print(f"DataParallel over {gpus} GPU(s) on {device}", flush=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000)
    weights = torch.linspace(-1, 1, 8)

    loss = torch.tensor(0.0)
    for step in range(1, args.steps + 1):
        x = torch.randn(64, 8, generator=data)
        y = (x @ weights + 0.5).unsqueeze(1)
        loss = F.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        lb.report(step, epoch=1, total_steps=args.steps, loss=loss)

    # Saves the unwrapped module's state_dict (no "module." prefix).
    lb.save_checkpoint(model, optimizer, step=args.steps, epoch=1, metrics={"loss": loss})
    print(f"done, loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
