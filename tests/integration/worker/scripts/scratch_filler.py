"""Writes $WRITE_BYTES bytes to a file named $FILL_NAME in each of /tmp, /var/tmp and /dev/shm,
then keeps running for $FILL_SLEEP_S seconds (default 300: until a stop from outside ends it)."""

import os
import time

for directory in ("/tmp", "/var/tmp", "/dev/shm"):
    with open(os.path.join(directory, os.environ["FILL_NAME"]), "wb") as out:
        out.write(os.urandom(int(os.environ["WRITE_BYTES"])))
print("written", flush=True)
time.sleep(float(os.environ.get("FILL_SLEEP_S", "300")))
