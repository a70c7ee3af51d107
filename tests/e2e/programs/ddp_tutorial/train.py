# The shape of PyTorch's "Getting Started with Distributed Data Parallel" tutorial, run with
# torchrun (gloo on CPU). It knows nothing of Launchbay: it saves its model to ./model.pt.
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from model import ToyModel
from torch.nn.parallel import DistributedDataParallel as DDP


def demo_basic(args):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"Start running basic DDP example on rank {rank}.")

    model = ToyModel()
    ddp_model = DDP(model)

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)

    for epoch in range(args.epochs):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        labels = torch.randn(20, 5)
        loss = loss_fn(outputs, labels)
        loss.backward()
        optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")

    if rank == 0:
        torch.save(ddp_model.module.state_dict(), "model.pt")
    dist.destroy_process_group()
    print(f"Finished running basic DDP example on rank {rank}.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    demo_basic(parser.parse_args())
