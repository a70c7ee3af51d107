"""Rank 0 reports checkpoints, good and bad (zip files, like torch.save's, without torch):

good-<i>.pt for i in 1..5 with loss 5, 1, 4, 3, 2 (the best is good-2); truncated.pt (half of
a zip); growing.pt (complete when reported, but still open for writing and appended to);
escapes (../, absolute, a symlink out of the directory) and a missing file.
"""

import io
import json
import os
import tempfile
import time
import zipfile

ckpt_dir = os.environ["LAUNCHBAY_CHECKPOINT_DIR"]
rank = int(os.environ["RANK"])


def zip_bytes(i: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", os.urandom(2048) + bytes([i]))
    return buffer.getvalue()


def report(path: str, step: int, loss: float) -> None:
    line = {"type": "checkpoint", "path": path, "step": step, "epoch": 0, "metrics": {"loss": loss}}
    with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a") as events:
        events.write(json.dumps(line) + "\n")


def save(name: str, data: bytes) -> None:
    temp = os.path.join(ckpt_dir, f".{name}.tmp")
    with open(temp, "wb") as handle:
        handle.write(data)
    os.replace(temp, os.path.join(ckpt_dir, name))


if rank == 0:
    with open(os.path.join(ckpt_dir, "truncated.pt"), "wb") as handle:
        handle.write(zip_bytes(0)[:1000])
    report("truncated.pt", 0, 0.0)
    for i, loss in enumerate([5.0, 1.0, 4.0, 3.0, 2.0], start=1):
        save(f"good-{i}.pt", zip_bytes(i))
        report(f"good-{i}.pt", i, loss)
        time.sleep(0.05)
    outside = os.path.join(os.path.dirname(ckpt_dir), "outside.pt")
    try:
        handle = open(outside, "wb")
    except PermissionError:  # a job user may not write there: somewhere else outside, then
        outside = os.path.join(tempfile.mkdtemp(), "outside.pt")
        handle = open(outside, "wb")
    with handle:
        handle.write(zip_bytes(9))
    os.symlink(outside, os.path.join(ckpt_dir, "link.pt"))
    for bad in ("../outside.pt", outside, "link.pt", "missing.pt"):
        report(bad, 9, 0.0)
    save("growing.pt", zip_bytes(7))
    with open(os.path.join(ckpt_dir, "growing.pt"), "ab") as handle:
        report("growing.pt", 7, 0.0)
        for _ in range(30):
            handle.write(b"x" * 100)
            handle.flush()
            time.sleep(0.1)
print(f"rank {rank} done", flush=True)
