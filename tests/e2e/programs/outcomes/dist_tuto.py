"""PyTorch's "Writing Distributed Applications with PyTorch" tutorial (dist_tuto: blocking
point-to-point communication): two `Process`es started by the script, gloo, `size = 2`;
unmodified but for `MASTER_PORT`, kept as Launchbay gives it (`setdefault`, as Launchbay's
hint for a taken port says) so that runs beside it on the machine never collide."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, size):
    tensor = torch.zeros(1)
    if rank == 0:
        tensor += 1
        # Send the tensor to process 1
        dist.send(tensor=tensor, dst=1)
    else:
        # Receive tensor from process 0
        dist.recv(tensor=tensor, src=0)
    print("Rank ", rank, " has data ", tensor[0])


def init_process(rank, size, fn, backend="gloo"):
    """Initialize the distributed environment."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


if __name__ == "__main__":
    size = 2
    processes = []
    mp.set_start_method("spawn")
    for rank in range(size):
        p = mp.Process(target=init_process, args=(rank, size, run))
        p.start()
        processes.append(p)

    for p in processes:
        p.join()
