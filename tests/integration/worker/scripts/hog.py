"""Allocates (and touches) memory until the kernel stops it."""

import time

chunks = []
for _ in range(4096):
    chunks.append(bytearray(16 * 2**20))  # zero-filled: every page touched
    time.sleep(0.005)
print("never ran out", flush=True)
