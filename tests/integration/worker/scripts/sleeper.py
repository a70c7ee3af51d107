"""Sleeps; options (arguments) for the watchdog and cancel tests:

--events-every S        rank 0 appends a metric line every S seconds
--ignore-sigterm-rank R rank R ignores SIGTERM (so only SIGKILL ends it)
--detached-child        every rank starts `sleep 600` in a session of its own
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--events-every", type=float, default=None)
parser.add_argument("--ignore-sigterm-rank", type=int, default=None)
parser.add_argument("--detached-child", action="store_true")
args = parser.parse_args()
rank = int(os.environ.get("RANK", "0"))
if args.ignore_sigterm_rank == rank:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if args.detached_child:
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print(f"rank {rank} sleeping", flush=True)
step = 0
while True:
    if args.events_every and rank == 0:
        step += 1
        with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "a") as events:
            events.write(
                json.dumps({"type": "metric", "step": step, "metrics": {"x": step}}) + "\n"
            )
        time.sleep(args.events_every)
    else:
        time.sleep(0.2)
