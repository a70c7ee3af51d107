"""A plain script that logs with TensorBoard as PyTorch's docs write it
(https://pytorch.org/docs/stable/tensorboard.html: `writer = SummaryWriter()`, then
`writer.add_scalar('Loss/train', np.random.random(), n_iter)` and its siblings, and
`writer.add_scalars('run_14h', {'xsinx': ..., 'xcosx': ..., 'tanx': ...}, i)`), with nothing of
Launchbay in it.

Then, with FLOOD_SCALARS=N, the hostile part: it writes an event file of its own holding N
scalars (1000 tags a step, in one Event per step, as TensorFlow's merged summaries do), with
its own encoder, under `z-flood/` (read after `runs/`).

Not the docs': the first line moves into LAUNCHBAY_OUTPUT_DIR, because the job's working
directory is not writable yet (remove it once it is).
"""

import os
import struct
import time

import numpy as np
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter()

for n_iter in range(100):
    writer.add_scalar("Loss/train", np.random.random(), n_iter)
    writer.add_scalar("Loss/test", np.random.random(), n_iter)
    writer.add_scalar("Accuracy/train", np.random.random(), n_iter)
    writer.add_scalar("Accuracy/test", np.random.random(), n_iter)

r = 5
for i in range(100):
    writer.add_scalars(
        "run_14h",
        {"xsinx": i * np.sin(i / r), "xcosx": i * np.cos(i / r), "tanx": np.tan(i / r)},
        i,
    )
writer.close()


def crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


TABLE = crc32c_table()


def crc32c(data, table=TABLE):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def delimited(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


flood = int(os.environ.get("FLOOD_SCALARS", "0"))
if flood:
    os.makedirs("z-flood", exist_ok=True)
    tags = [delimited(1, f"flood/{j}".encode()) for j in range(1000)]
    with open("z-flood/events.out.tfevents.flood", "wb") as out:
        for step in range(flood // 1000):
            values = b"".join(
                delimited(1, tag + varint(2 << 3 | 5) + struct.pack("<f", step + j / 1000))
                for j, tag in enumerate(tags)
            )
            event = (
                varint(1 << 3 | 1)
                + struct.pack("<d", time.time())
                + varint(2 << 3)
                + varint(step)
                + delimited(5, values)
            )
            length = struct.pack("<Q", len(event))
            out.write(length + struct.pack("<I", crc32c(length)))
            out.write(event + struct.pack("<I", crc32c(event)))
    print(f"wrote {flood} scalars", flush=True)
