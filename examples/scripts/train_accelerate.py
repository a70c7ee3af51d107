"""Launch style: Hugging Face accelerate, started by torchrun.

`Accelerator()` reads the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*)
and sets up the process group itself; `accelerator.prepare` wraps the model in DDP and
shards the data loader. On CPU, accelerate runs multi-process only when told to with
ACCELERATE_USE_CPU=1, which Launchbay sets for torchrun jobs on CPU; without it, it quietly
falls back to independent single processes. The main process appends JSON lines to
$LAUNCHBAY_EVENTS_FILE.

Its spec is `train_accelerate.yaml`, beside it, which says how to run it:
`launchbay run -f train_accelerate.yaml -- python train_accelerate.py`.
"""

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def report_event(event: dict) -> None:
    path = os.environ.get("LAUNCHBAY_EVENTS_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as events:
            events.write(json.dumps({**event, "ts": time.time()}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    accelerator = Accelerator()
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if accelerator.num_processes != launched:
        # Every process would think it is the main one and report the same steps.
        raise SystemExit(
            f"accelerate sees {accelerator.num_processes} process(es) but torchrun started "
            f"{launched}: on CPU, set ACCELERATE_USE_CPU=1 in the job spec's env"
        )
    print(
        f"process {accelerator.process_index} of {accelerator.num_processes} "
        f"({accelerator.distributed_type}) on {accelerator.device}",
        flush=True,
    )
    torch.manual_seed(0)
    x = torch.randn(512, 8)
    y = (x @ torch.linspace(-1, 1, 8) + 0.5).unsqueeze(1)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    step = 0
    metrics: dict[str, float] = {}
    for epoch in range(1, args.epochs + 1):
        for inputs, targets in loader:
            loss = F.mse_loss(model(inputs), targets)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            step += 1
            # A collective: every process calls it; the main process reports the mean.
            metrics = {"loss": accelerator.reduce(loss.detach(), reduction="mean").item()}
            if accelerator.is_main_process:
                report_event({"type": "metric", "step": step, "epoch": epoch, "metrics": metrics})

    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        directory = os.environ.get("LAUNCHBAY_CHECKPOINT_DIR", "checkpoints")
        os.makedirs(directory, exist_ok=True)
        name = f"step-{step:06d}.pt"
        temp = os.path.join(directory, f".{name}.tmp")
        state = {"model": accelerator.unwrap_model(model).state_dict(), "step": step}
        with open(temp, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, os.path.join(directory, name))  # complete before its line
        report_event(
            {"type": "checkpoint", "path": name, "step": step, "epoch": epoch, "metrics": metrics}
        )
    accelerator.wait_for_everyone()
    print(f"process {accelerator.process_index} done", flush=True)
    accelerator.end_training()  # destroys the process group


if __name__ == "__main__":
    main()
