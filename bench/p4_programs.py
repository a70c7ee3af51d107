"""The programs P4's jobs run (`bench.p4_metrics`), uploaded as code: `train.py`, a one-rank
training loop that reports in phases, and `lines.py`, which appends timed metric lines."""

# `train.py <steps> <warmup> <metrics a step> <width> <phase steps> <cycle>`: writes the
# phases' timings to bench_result.json in its output directory.
TRAIN_SOURCE = '''\
"""Launchbay bench P4a: a one-rank step loop that reports METRICS metrics a step.

argv: steps warmup metrics width phase_steps cycle. With phase_steps = 0 it reports every
step, each line written before report() returns; else phases of phase_steps steps go through
the comma-separated modes of cycle: off, written, queued (`queue_reports`) or plain (the same
line appended by hand to the events file, no SDK), and each phase is timed. Timings go to
bench_result.json in the job's output directory ($LAUNCHBAY_OUTPUT_DIR: its code directory
is read-only).
"""
import json
import os
import sys
import time

import torch
from torch import nn

from jobs import runtime as lb

def main() -> None:
    steps, warmup, metrics, width, phase_steps = (int(a) for a in sys.argv[1:6])
    cycle = sys.argv[6].split(",")
    names = [f"m{i:02d}" for i in range(metrics)]
    phases = []
    with lb.distributed() as ctx:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1))
        model = lb.prepare_model(net, ctx)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
        x, y = torch.randn(32, width), torch.randn(32, 1)
        length = phase_steps or steps
        mode = "off"
        plain = open(os.environ["LAUNCHBAY_EVENTS_FILE"], "ab", buffering=0)
        for step in range(1, warmup + steps + 1):
            if step > warmup and (step - warmup - 1) % length == 0:
                mode = cycle[len(phases) % len(cycle)] if phase_steps else "written"
                lb.queue_reports(0.05 if mode == "queued" else None)
                phases.append({"mode": mode, "steps": 0, "s": 0.0, "report_s": 0.0})
                started = time.perf_counter()
            loss = ((model(x) - y) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            value = loss.item()
            if mode != "off":
                before = time.perf_counter()
                values = {n: value + i for i, n in enumerate(names)}
                if mode == "plain":
                    line = {"type": "metric", "step": step, "epoch": 1, "metrics": values}
                    line["ts"] = time.time()
                    plain.write((json.dumps(line) + "\\n").encode())
                else:
                    lb.report(step, 1, **values)
                phases[-1]["report_s"] += time.perf_counter() - before
            if step > warmup:
                phases[-1]["steps"] += 1
                phases[-1]["s"] = time.perf_counter() - started
        plain.close()
    with open(os.path.join(os.environ["LAUNCHBAY_OUTPUT_DIR"], "bench_result.json"), "w") as out:
        json.dump({"phases": phases}, out)


if __name__ == "__main__":
    main()
'''

SSE_SOURCE = '''\
"""Launchbay bench P4b: append `count` metric lines at `rate` lines/s, each with its ts."""
import json
import os
import sys
import time

count, rate, delay = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
time.sleep(delay)  # the SSE client connects meanwhile
with open(os.environ["LAUNCHBAY_EVENTS_FILE"], "ab", buffering=0) as events:
    due = time.monotonic()
    for step in range(1, count + 1):
        line = {"type": "metric", "step": step, "metrics": {"lat": float(step)}, "ts": time.time()}
        events.write((json.dumps(line) + "\\n").encode())
        due += 1 / rate
        time.sleep(max(0.0, due - time.monotonic()))
'''
