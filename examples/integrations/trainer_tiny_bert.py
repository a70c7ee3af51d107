"""Hugging Face `Trainer` on 2 ranks with `LaunchbayCallback`: a tiny BERT built from a config
(nothing downloaded from a model hub) learns to tell two kinds of token sequences apart.
Metrics (loss, learning_rate, eval_loss, eval_accuracy) reach Launchbay, each checkpoint
Trainer saves (model, optimizer, scheduler, every rank's RNG state) is registered, and a retried
attempt resumes from the latest. Without `LaunchbayCallback` and the two helpers, capture
(`capture: auto`, the default) records the same from wherever `output_dir` is.

`--fail-at-step N` makes the first attempt fail right after the checkpoint of step N: with
`max_retries: 1` the second attempt resumes from it. transformers is the job's own
requirement, installed by the worker (docs/training-scripts.md).

Its spec is `trainer_tiny_bert.yaml`, beside it, which says how to run it:
`launchbay run -f trainer_tiny_bert.yaml -- python trainer_tiny_bert.py`.
"""

import argparse
import os

import numpy as np
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from jobs.integrations.transformers import (
    LaunchbayCallback,
    checkpoint_dir,
    resume_from_checkpoint,
)

VOCAB, LENGTH = 64, 16


class Sequences(torch.utils.data.Dataset):
    """Label 1: tokens from the upper half of the vocabulary; label 0: the lower half."""

    def __init__(self, count: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 2, (count,), generator=generator)
        low = torch.randint(2, VOCAB // 2, (count, LENGTH), generator=generator)
        self.inputs = low + self.labels.unsqueeze(1) * (VOCAB // 2 - 2)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.inputs[i], "labels": self.labels[i]}


class FailOnce(TrainerCallback):
    """Fails the first attempt right after the checkpoint of step `step` (every rank)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        first = os.environ.get("LAUNCHBAY_ATTEMPT", "1") == "1"
        if first and state.global_step == self.step:
            raise SystemExit(f"failing on purpose after the checkpoint of step {self.step}")


def accuracy(prediction) -> dict[str, float]:  # type: ignore[no-untyped-def]
    return {
        "accuracy": float((np.argmax(prediction.predictions, -1) == prediction.label_ids).mean())
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=12)
    parser.add_argument("--save-steps", type=int, default=4)
    parser.add_argument("--fail-at-step", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=LENGTH,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    training = TrainingArguments(
        output_dir=checkpoint_dir(),
        max_steps=args.max_steps,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=32,
        learning_rate=1e-3,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=args.save_steps,
        save_steps=args.save_steps,
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    callbacks: list[TrainerCallback] = [LaunchbayCallback()]
    if args.fail_at_step:
        callbacks.append(FailOnce(args.fail_at_step))
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=Sequences(512, seed=1),
        eval_dataset=Sequences(64, seed=2),
        compute_metrics=accuracy,
        callbacks=callbacks,
    )
    resume = resume_from_checkpoint()
    if resume is not None and trainer.is_world_process_zero():
        print(f"resuming from {os.path.basename(resume)}", flush=True)
    trainer.train(resume_from_checkpoint=resume)


if __name__ == "__main__":
    main()
