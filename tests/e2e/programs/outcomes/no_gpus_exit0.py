"""A script that checks for its GPUs and, finding too few, says so and exits 0, as many
tutorials' scripts do; it prints a very long line first (a job's text quoted in a warning is
cut)."""

import sys

import torch

print("x" * 100_000)
n_gpus = torch.cuda.device_count()
if n_gpus < 2:
    print(f"Unable to locate sufficient 2 gpus to run this example. Exiting.{'!' * 50_000}")
    sys.exit(0)
