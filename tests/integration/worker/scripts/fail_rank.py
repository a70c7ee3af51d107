"""Rank 1 raises after a moment; rank 0 would sleep for a long time (torchrun stops it)."""

import os
import time

rank = int(os.environ["RANK"])
print(f"rank {rank} starting", flush=True)


def step() -> None:
    raise RuntimeError(f"synthetic failure on rank {rank}")


if rank == 1:
    time.sleep(0.3)
    step()
time.sleep(60)
