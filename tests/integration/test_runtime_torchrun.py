"""A user's training script written against the runtime SDK, run the two ways users run it:
under torchrun with two ranks, and as a plain ``python train.py`` (a world of one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tests.support.ranks import run_torchrun

SCRIPT = """
import torch
import torch.nn.functional as F
from torch import nn

from jobs import runtime as lb

NUM_SAMPLES = 37  # odd on purpose: the sampler pads one rank's shard


def main() -> None:
    with lb.distributed() as ctx:
        print(f"rank {ctx.rank} of {ctx.world_size} on {ctx.device} ({ctx.backend})", flush=True)
        lb.seed_everything(0)
        xs = torch.randn(NUM_SAMPLES, 4)
        data = [(i, xs[i], float(xs[i].sum())) for i in range(NUM_SAMPLES)]
        model = lb.prepare_model(nn.Linear(4, 1), ctx)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = lb.make_loader(data, 4, shuffle=True, seed=0, ctx=ctx)
        step = 0
        for epoch in (1, 2):
            for _, x, y in lb.start_epoch(loader, epoch):
                with lb.autocast(ctx):
                    out = model(x)
                    assert out.dtype == torch.bfloat16, out.dtype
                loss = F.mse_loss(out.float().squeeze(1), y.float())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
            seen = torch.cat([i for i, _, _ in lb.start_epoch(loader, epoch)])
            every = lb.gather_eval(seen, NUM_SAMPLES)
            lb.report(
                step, epoch, loss=lb.reduce_mean(loss), rank=ctx.rank, world=ctx.world_size,
                seen=len(every), distinct=len(set(every.tolist())),
            )
        lb.save_checkpoint(model, optimizer, step=step, epoch=2)


if __name__ == "__main__":
    main()
"""


def prepare(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "train.py").write_text(SCRIPT)
    env = {
        "LAUNCHBAY_EVENTS_FILE": str(run_dir / "events.jsonl"),
        "LAUNCHBAY_CHECKPOINT_DIR": str(run_dir / "checkpoints"),
        "LAUNCHBAY_AMP": "bf16",
        "LAUNCHBAY_COLLECTIVE_TIMEOUT_S": "60",
    }
    return run_dir, env


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]


def test_a_script_under_torchrun_with_two_ranks(tmp_path: Path) -> None:
    run_dir, env = prepare(tmp_path)
    done = run_torchrun(["train.py"], env=env, cwd=run_dir, timeout_s=120)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "rank 0 of 2 on cpu (gloo)" in done.stdout
    assert "rank 1 of 2 on cpu (gloo)" in done.stdout
    events = read_events(run_dir)
    metrics = [e for e in events if e["type"] == "metric"]
    # 37 samples: 19 per rank (one padded), 5 steps of 4 per epoch.
    assert [(e["step"], e["epoch"]) for e in metrics] == [(5, 1), (10, 2)]
    for line in metrics:
        assert line["metrics"]["rank"] == 0 and line["metrics"]["world"] == 2
        assert line["metrics"]["seen"] == line["metrics"]["distinct"] == 37
    (checkpoint,) = [e for e in events if e["type"] == "checkpoint"]
    state = torch.load(run_dir / "checkpoints" / checkpoint["path"], weights_only=True)
    nn.Linear(4, 1).load_state_dict(state["model"], strict=True)
    assert state["world_size"] == 2 and state["step"] == 10


def test_the_same_script_as_a_plain_python_process(tmp_path: Path) -> None:
    run_dir, env = prepare(tmp_path)
    child_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        child_env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "train.py"],
        cwd=run_dir,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 of 1 on cpu (gloo)" in done.stdout
    metrics = [e for e in read_events(run_dir) if e["type"] == "metric"]
    # One process sees all 37 samples: 10 steps of 4 per epoch.
    assert [(e["step"], e["metrics"]["world"], e["metrics"]["seen"]) for e in metrics] == [
        (10, 1, 37),
        (20, 1, 37),
    ]
    assert (run_dir / "checkpoints" / "step-000000020.pt").is_file()


QUEUED_SCRIPT = """
from jobs import runtime as lb

with lb.distributed() as ctx:
    lb.queue_reports(0.05)
    for step in range(1, 201):
        lb.report(step, 1, loss=1.0 / step, rank=ctx.rank)
    lb.write_event({"type": "custom", "after": 200})
    for step in range(201, 301):
        lb.report(step, 1, loss=1.0 / step, rank=ctx.rank)
"""


def test_queued_reports_under_torchrun_all_arrive_in_order(tmp_path: Path) -> None:
    """The SDK's thread writes queued lines; the rest at exit, after an unqueued line."""
    run_dir, env = prepare(tmp_path)
    (run_dir / "train.py").write_text(QUEUED_SCRIPT)
    done = run_torchrun(["train.py"], env=env, cwd=run_dir, timeout_s=120)
    assert done.returncode == 0, done.stdout[-3000:]
    events = read_events(run_dir)
    expected = [*range(1, 201), 200, *range(201, 301)]
    assert [e.get("step", e.get("after")) for e in events] == expected
    assert events[200]["type"] == "custom"
    assert {e["metrics"]["rank"] for e in events if e["type"] == "metric"} == {0}
