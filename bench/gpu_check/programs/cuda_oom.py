"""Fill the GPU until CUDA runs out of memory, as a batch too large for it does (a GPU check's
program): 8 GiB blocks are taken and kept until an allocation fails, and that
torch.OutOfMemoryError is left to end the rank."""

import torch

BLOCK = 8 * 2**30
held = []
while True:
    held.append(torch.empty(BLOCK, dtype=torch.uint8, device="cuda"))
    print(
        f"holding {len(held) * BLOCK / 2**30:.0f} GiB on {torch.cuda.get_device_name()}", flush=True
    )
