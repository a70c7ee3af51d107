"""Train forever on the job's device, a metric line every half second (a GPU check's program,
for cancelling a running job): it holds the GPU the way a training loop does, until stopped."""

import json
import os
import time

import torch

device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
size = 4096 if device.type == "cuda" else 128
a = torch.randn(size, size, device=device)
b = torch.randn(size, size, device=device)
step, last = 0, 0.0
print(f"spinning on {device}", flush=True)
while True:
    c = a @ b
    step += 1
    if time.monotonic() - last >= 0.5:
        last = time.monotonic()
        value = float(c[0, 0])  # waits for the GPU
        if os.environ.get("RANK", "0") == "0":
            with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a") as events:
                line = {"type": "metric", "step": step, "metrics": {"value": value}}
                events.write(json.dumps(line) + "\n")
