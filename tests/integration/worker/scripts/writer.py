"""Writes $WRITE_BYTES bytes into its working directory (not as a checkpoint): an artifact."""

import os

with open("blob.bin", "wb") as out:
    out.write(os.urandom(int(os.environ["WRITE_BYTES"])))
