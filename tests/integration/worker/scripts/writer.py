"""Writes $WRITE_BYTES bytes into the job's checkpoint directory (not as a checkpoint)."""

import os

with open(os.path.join(os.environ["LAUNCHBAY_CHECKPOINT_DIR"], "blob.bin"), "wb") as out:
    out.write(os.urandom(int(os.environ["WRITE_BYTES"])))
