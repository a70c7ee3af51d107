"""A program that counts on the interpreter's exit, as plain scripts do: a file it never closes
(its last write still in the buffer), an `atexit` handler, a `weakref.finalize` callback of an
object still alive, a thread (not a daemon) that is still writing when the main code returns,
and an exit status of its own (EXIT_PROBE_CODE)."""

import atexit
import os
import sys
import threading
import time
import weakref
from pathlib import Path

import torch

out = Path(os.environ["LAUNCHBAY_OUTPUT_DIR"])
rank = os.environ["RANK"]
out.mkdir(parents=True, exist_ok=True)

log = open(out / f"unclosed-{rank}.txt", "w")  # noqa: SIM115 - never closed, as scripts do
log.write(f"rank {rank} sum {int(torch.ones(3).sum())}\n")


def late_writer() -> None:
    time.sleep(0.5)
    (out / f"thread-{rank}.txt").write_text("written after the main code returned")


threading.Thread(target=late_writer).start()
atexit.register(lambda: (out / f"atexit-{rank}.txt").write_text("ran"))


class Model:
    pass


model = Model()
weakref.finalize(model, (out / f"finalize-{rank}.txt").write_text, "ran")
sys.exit(int(os.environ.get("EXIT_PROBE_CODE", "0")))
