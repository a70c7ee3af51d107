"""Waits until the file named by its first argument exists, then fails: a job that fails on its
own, at a moment the test chooses."""

import sys
import time
from pathlib import Path

go = Path(sys.argv[1])
print("waiting for the test", flush=True)
while not go.exists():
    time.sleep(0.05)
raise RuntimeError("failed on its own, as told")
