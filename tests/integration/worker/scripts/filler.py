"""Writes $WRITE_BYTES bytes into the job's checkpoint directory (not as a checkpoint), then
keeps running for $FILL_SLEEP_S seconds (default 300: until a stop from outside ends it)."""

import os
import time

with open(os.path.join(os.environ["LAUNCHBAY_CHECKPOINT_DIR"], "fill.bin"), "wb") as out:
    out.write(os.urandom(int(os.environ["WRITE_BYTES"])))
print("written", flush=True)
time.sleep(float(os.environ.get("FILL_SLEEP_S", "300")))
