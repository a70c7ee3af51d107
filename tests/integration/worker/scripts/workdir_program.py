"""A plain program (no SDK): writes to its working directory, /tmp, $HOME and /var/tmp, leaves
symbolic links out of it, reports one checkpoint the events-file way; then, once told (a file
`go` appears in its working directory), does to its checkpoints what programs do after a save:
deletes one, cuts one short in place, removes a checkpoint directory.
"""

import io
import json
import os
import shutil
import sys
import time
import zipfile


def zip_bytes(tag: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", tag * 4096)
    return buffer.getvalue()


marker = os.environ["MARKER"]
with open("model.pt", "wb") as out:  # declared: outputs.checkpoints ["model.pt"]
    out.write(zip_bytes(b"model"))
os.makedirs("out/checkpoint-7")  # declared: "out/checkpoint-*"
for name in ("weights.bin", "state.json"):
    with open(f"out/checkpoint-7/{name}", "wb") as out:
        out.write(name.encode() * 1000)
os.makedirs("logs")
with open("logs/metrics.json", "w") as out:
    json.dump({"loss": 0.5}, out)
with open("config.json", "w") as out:  # a file of the uploaded code, changed
    out.write('{"changed": true}\n')
os.symlink("/etc/hostname", "escape.txt")
os.symlink("/etc", "etc")
for where in ("/tmp", "/var/tmp", os.environ["HOME"]):
    with open(os.path.join(where, marker), "w") as out:
        out.write("scratch\n")

step = os.path.join(os.environ["LAUNCHBAY_CHECKPOINT_DIR"], "step-1.pt")
with open(step + ".tmp", "wb") as out:
    out.write(zip_bytes(b"step"))
os.replace(step + ".tmp", step)
with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a") as events:
    line = {"type": "checkpoint", "path": "step-1.pt", "step": 1, "epoch": 0, "metrics": {}}
    events.write(json.dumps(line) + "\n")
print("written", flush=True)

deadline = time.monotonic() + 120
while not os.path.exists("go"):
    if time.monotonic() > deadline:
        sys.exit("never told to go on")
    time.sleep(0.05)
os.unlink(step)
with open("model.pt", "r+b") as out:  # cut short in place (a save to the same name that died)
    out.truncate(100)
shutil.rmtree("out/checkpoint-7")
print("done", flush=True)
