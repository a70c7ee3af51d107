"""Writes $WRITE_BYTES bytes into the job's checkpoint directory (not as a checkpoint), or to
$FILL_PATH (relative: in its working directory), then keeps running for $FILL_SLEEP_S seconds
(default 300: until a stop from outside ends it)."""

import os
import time

path = os.environ.get("FILL_PATH") or os.path.join(
    os.environ["LAUNCHBAY_CHECKPOINT_DIR"], "fill.bin"
)
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
with open(path, "wb") as out:
    out.write(os.urandom(int(os.environ["WRITE_BYTES"])))
print("written", flush=True)
time.sleep(float(os.environ.get("FILL_SLEEP_S", "300")))
