"""An accelerate program in the shape of accelerate's examples/complete_nlp_example.py (the
by_feature/checkpointing.py loop with tracking): `Accelerator(cpu=..., log_with="all",
project_dir=...)`, `prepare`, `save_state(f"epoch_{epoch}")` under `--output_dir` (default
"."), `load_state` only when given `--resume_from_checkpoint`, `accelerator.print(f"epoch
{epoch}:", eval_metric)` and `accelerator.log({...}, step=epoch)`. Nothing of Launchbay in it.
A small classifier on made-up points stands in for BERT on GLUE (nothing from the Hub), and
accuracy and F1 are counted here instead of by `evaluate`.

Not the example's: the first line of `main` moves into LAUNCHBAY_OUTPUT_DIR, because the job's
working directory is not writable yet (remove it once it is), and, with KILL_RANK_AT_EPOCH set,
rank 1 is killed outright (SIGKILL) as that epoch starts in the first attempt, once every rank
is there (rank 0 done saving the epoch before): the fault the test injects.
"""

import argparse
import os
import signal

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset


def get_dataloaders(batch_size):
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(320, 8, generator=generator)
    labels = (inputs[:, 0] + inputs[:, 1] > 0).long()
    train = TensorDataset(inputs[:256], labels[:256])
    valid = TensorDataset(inputs[256:], labels[256:])
    return (
        DataLoader(train, shuffle=True, batch_size=batch_size),
        DataLoader(valid, shuffle=False, batch_size=32),
    )


def compute(predictions, references):
    true_positive = ((predictions == 1) & (references == 1)).sum().item()
    positive = (predictions == 1).sum().item()
    relevant = (references == 1).sum().item()
    f1 = 2 * true_positive / max(positive + relevant, 1)
    return {"accuracy": (predictions == references).float().mean().item(), "f1": f1}


def training_function(config, args):
    if args.with_tracking:
        accelerator = Accelerator(cpu=args.cpu, log_with="all", project_dir=args.project_dir)
    else:
        accelerator = Accelerator(cpu=args.cpu)
    num_epochs = int(config["num_epochs"])
    checkpointing_steps = args.checkpointing_steps
    if args.with_tracking:
        accelerator.init_trackers("complete_example", config)
    set_seed(int(config["seed"]))
    train_dataloader, eval_dataloader = get_dataloaders(int(config["batch_size"]))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.AdamW(params=model.parameters(), lr=config["lr"])
    lr_scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=100)
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    starting_epoch = 0
    if args.resume_from_checkpoint:
        accelerator.print(f"Resumed from checkpoint: {args.resume_from_checkpoint}")
        accelerator.load_state(args.resume_from_checkpoint)
        path = os.path.basename(args.resume_from_checkpoint)
        starting_epoch = int(path.replace("epoch_", "")) + 1
    for epoch in range(starting_epoch, num_epochs):
        kill_at = os.environ.get("KILL_RANK_AT_EPOCH")
        first = os.environ.get("LAUNCHBAY_ATTEMPT") == "1"
        if kill_at and first and epoch == int(kill_at):
            accelerator.wait_for_everyone()  # rank 0 has saved (and capture copied) the last
            if accelerator.process_index == 1:
                os.kill(os.getpid(), signal.SIGKILL)
        model.train()
        total_loss = 0
        for batch in train_dataloader:
            inputs, labels = batch
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            total_loss += loss.detach().float()
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        model.eval()
        predictions, references = [], []
        for inputs, labels in eval_dataloader:
            with torch.no_grad():
                logits = model(inputs)
            gathered = accelerator.gather_for_metrics((logits.argmax(dim=-1), labels))
            predictions.append(gathered[0])
            references.append(gathered[1])
        eval_metric = compute(torch.cat(predictions), torch.cat(references))
        accelerator.print(f"epoch {epoch}:", eval_metric)
        if args.with_tracking:
            accelerator.log(
                {
                    "accuracy": eval_metric["accuracy"],
                    "f1": eval_metric["f1"],
                    "train_loss": total_loss.item() / len(train_dataloader),
                    "epoch": epoch,
                },
                step=epoch,
            )
        if checkpointing_steps == "epoch":
            output_dir = f"epoch_{epoch}"
            if args.output_dir is not None:
                output_dir = os.path.join(args.output_dir, output_dir)
            accelerator.save_state(output_dir)
    accelerator.end_training()


def main():
    parser = argparse.ArgumentParser(description="Simple example of training script.")
    parser.add_argument("--cpu", action="store_true", help="If passed, will train on the CPU.")
    parser.add_argument("--checkpointing_steps", type=str, default=None)
    parser.add_argument("--resume_from_checkpoint", type=str, default=None)
    parser.add_argument("--with_tracking", action="store_true")
    parser.add_argument("--output_dir", type=str, default=".")
    parser.add_argument("--project_dir", type=str, default="logs")
    args = parser.parse_args()
    config = {"lr": 1e-2, "num_epochs": 3, "seed": 42, "batch_size": 16}
    training_function(config, args)


if __name__ == "__main__":
    main()
