"""Launchbay's runtime SDK: the few calls a training script makes inside the ranks.

It reads the environment the worker sets (LAUNCHBAY_*) and torchrun's (RANK, WORLD_SIZE...),
and still works as a one-process world under a plain ``python train.py``::

    from jobs import runtime as lb

    with lb.distributed() as ctx:  # under torchrun, or a world of one
        lb.seed_everything(0)
        model = lb.prepare_model(Net(), ctx)  # DDP when there are several ranks
        optimizer = torch.optim.AdamW(model.parameters())
        loader = lb.make_loader(train_set, 64, shuffle=True, seed=0, ctx=ctx)
        per_epoch = lb.batches_per_epoch(loader)
        step, first_epoch, skip = 0, 1, 0
        if (state := lb.load_resume_state()) is not None:
            lb.restore(state, model, optimizer)
            step = state["step"]
            first_epoch, skip = lb.resume_position(state, per_epoch)
        for epoch in range(first_epoch, epochs + 1):
            for x, y in lb.start_epoch(loader, epoch, skip_batches=skip):
                with lb.autocast(ctx):
                    loss = F.cross_entropy(model(x.to(ctx.device)), y.to(ctx.device))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                lb.report(step, epoch, loss=lb.reduce_mean(loss))  # all call, rank 0 writes
            skip = 0
            lb.save_checkpoint(model, optimizer, step=step, epoch=epoch,
                               sampler_position=per_epoch)

This package imports torch; the torch-free parts of the contract live in ``jobs.runtime.env``.
"""

from jobs.runtime.accumulation import accumulation_context, is_accumulation_boundary
from jobs.runtime.amp import autocast, make_grad_scaler, resolve_amp
from jobs.runtime.checkpoint import (
    checkpoint_due,
    checkpoint_name,
    load_resume_state,
    restore,
    resume_position,
    save_checkpoint,
)
from jobs.runtime.data import (
    ResumableDistributedSampler,
    batches_per_epoch,
    make_loader,
    seed_everything,
    start_epoch,
)
from jobs.runtime.distributed import (
    DistContext,
    DistributedSetupError,
    abort_distributed,
    barrier,
    distributed,
    gather_eval,
    get_context,
    get_rank,
    prepare_model,
    reduce_mean,
    setup_distributed,
    teardown_distributed,
    unwrap_model,
)
from jobs.runtime.env import CheckpointPolicy, RuntimeEnvError, checkpoint_policy, read_config
from jobs.runtime.events import (
    clean_metrics,
    close_events,
    queue_reports,
    report,
    write_event,
)
from jobs.runtime.marks import evaluating, marked

__all__ = [
    "CheckpointPolicy",
    "DistContext",
    "DistributedSetupError",
    "ResumableDistributedSampler",
    "RuntimeEnvError",
    "abort_distributed",
    "accumulation_context",
    "autocast",
    "barrier",
    "batches_per_epoch",
    "checkpoint_due",
    "checkpoint_name",
    "checkpoint_policy",
    "clean_metrics",
    "close_events",
    "distributed",
    "evaluating",
    "gather_eval",
    "get_context",
    "get_rank",
    "is_accumulation_boundary",
    "load_resume_state",
    "make_grad_scaler",
    "make_loader",
    "marked",
    "prepare_model",
    "queue_reports",
    "read_config",
    "reduce_mean",
    "report",
    "resolve_amp",
    "restore",
    "resume_position",
    "save_checkpoint",
    "seed_everything",
    "setup_distributed",
    "start_epoch",
    "teardown_distributed",
    "unwrap_model",
    "write_event",
]
