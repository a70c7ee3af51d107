"""A DeepSpeed ZeRO stage-2 loop as DeepSpeed's getting-started guide writes it (argparse with
`--local_rank` and DeepSpeed's config arguments, `deepspeed.initialize`, `engine.backward`,
`engine.step`, `engine.save_checkpoint` / `load_checkpoint`), reporting to Launchbay with the
plain events-file protocol: a `metric` line per step and a `checkpoint` line naming each
checkpoint directory DeepSpeed wrote (``<checkpoint dir>/global_step<N>/``), written once the
directory is complete.

DeepSpeed is the job's own requirement. On CPU it picks its CPU accelerator and gloo by itself
and compiles its shared-memory communication op on first use (minutes; Launchbay keeps the
build for the owner's later jobs). `--fail-at-step N` makes the first attempt fail after the
checkpoint at step N: with `max_retries: 1` the next attempt resumes from it.

Its spec is `deepspeed_zero.yaml`, beside it, which says how to run it:
`launchbay run -f deepspeed_zero.yaml -- python deepspeed_zero.py`.
"""

import argparse
import json
import os
from pathlib import Path

import deepspeed
import torch
import torch.nn.functional as F
from torch import nn

CONFIG = {
    "train_micro_batch_size_per_gpu": 16,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "torch_adam": True}},
    "zero_optimization": {"stage": 2},
    "steps_per_print": 1_000_000,
}


def write_line(line: dict[str, object]) -> None:
    """One line of the events-file protocol (rank 0 only; a plain run has no events file)."""
    events = os.environ.get("LAUNCHBAY_EVENTS_FILE")
    if events:
        with open(events, "a") as out:
            out.write(json.dumps(line) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--save-every", type=int, default=4)
    parser.add_argument("--fail-at-step", type=int, default=0)
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()

    deepspeed.init_distributed()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    engine, _, _, _ = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters(), config=CONFIG
    )
    save_dir = Path(os.environ.get("LAUNCHBAY_CHECKPOINT_DIR", "checkpoints"))
    step = 0
    resume = os.environ.get("LAUNCHBAY_RESUME_FROM")
    if resume:  # a retried attempt: the checkpoint directory Launchbay passes back
        tag = Path(resume).name
        _, client_state = engine.load_checkpoint(str(save_dir), tag=tag)
        step = int(client_state["step"])
        if engine.global_rank == 0:
            print(f"resumed from {tag} (step {step})", flush=True)

    generator = torch.Generator().manual_seed(engine.global_rank)
    while step < args.steps:
        x = torch.randn(16, 8, generator=generator)
        loss = F.mse_loss(engine(x), x.sum(dim=1, keepdim=True))
        engine.backward(loss)
        engine.step()
        step += 1
        metrics = {"loss": loss.item()}
        if engine.global_rank == 0:
            write_line({"type": "metric", "step": step, "epoch": 0, "metrics": metrics})
        if step % args.save_every == 0:
            tag = f"global_step{step}"
            engine.save_checkpoint(str(save_dir), tag=tag, client_state={"step": step})
            if engine.global_rank == 0:  # every rank's shards are written: the dir is complete
                line = {"type": "checkpoint", "path": tag, "step": step, "epoch": 0}
                write_line({**line, "metrics": metrics})
        if step == args.fail_at_step and not resume:
            raise SystemExit(f"failing on purpose at step {step}")


if __name__ == "__main__":
    main()
