"""Rank 1 fails in the first run of the ranks; after torchrun's restart both succeed."""

import os
import sys
import time

rank = int(os.environ["RANK"])
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
print(f"rank {rank} restart {restart} argv={sys.argv[1:]}", flush=True)
if rank == 1 and restart == 0:
    time.sleep(0.2)
    sys.exit(3)
time.sleep(0.5)
