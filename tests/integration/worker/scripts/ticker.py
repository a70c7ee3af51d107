"""Prints a line every 0.05 s for 3 s, as a training loop logs its steps."""

import time

for step in range(60):
    print(f"step {step}", flush=True)
    time.sleep(0.05)
