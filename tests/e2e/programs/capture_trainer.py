"""A Trainer program as Hugging Face's docs write one (the text-classification task guide:
`TrainingArguments(output_dir="my_awesome_model", eval_strategy="epoch", save_strategy="epoch",
load_best_model_at_end=True, ...)`, `Trainer(model, args, train_dataset, eval_dataset,
compute_metrics)`, `trainer.train()`), with nothing of Launchbay in it: a tiny BERT built from a
config and made-up sequences, so nothing comes from the Hub. `report_to` is left at its default
("all": TensorBoard, which the job installs).

One thing is not the guide's: a callback kills rank 1 outright (SIGKILL) right after the first
checkpoint when KILL_RANK_AFTER_SAVE is set in the first attempt: the fault the test injects.
"""

import os
import signal

import numpy as np
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

VOCAB, LENGTH = 64, 16


class Sequences(torch.utils.data.Dataset):
    """Label 1: tokens from the upper half of the vocabulary; label 0: the lower half."""

    def __init__(self, count, seed):
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 2, (count,), generator=generator)
        low = torch.randint(2, VOCAB // 2, (count, LENGTH), generator=generator)
        self.inputs = low + self.labels.unsqueeze(1) * (VOCAB // 2 - 2)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.inputs[i], "labels": self.labels[i]}


class KillAfterFirstSave(TrainerCallback):
    saved = False

    def on_save(self, args, state, control, **kwargs):
        self.saved = True

    def on_step_begin(self, args, state, control, **kwargs):
        first = os.environ.get("LAUNCHBAY_ATTEMPT") == "1"
        if first and self.saved and args.process_index == 1:
            os.kill(os.getpid(), signal.SIGKILL)


def compute_metrics(eval_pred):
    predictions, labels = eval_pred
    return {"accuracy": float((np.argmax(predictions, axis=1) == labels).mean())}


def main():
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
    training_args = TrainingArguments(
        output_dir="my_awesome_model",
        learning_rate=1e-3,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=16,
        num_train_epochs=3,
        weight_decay=0.01,
        eval_strategy="epoch",
        save_strategy="epoch",
        logging_steps=4,
        load_best_model_at_end=True,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=Sequences(512, seed=1),
        eval_dataset=Sequences(64, seed=2),
        compute_metrics=compute_metrics,
        callbacks=[KillAfterFirstSave()] if os.environ.get("KILL_RANK_AFTER_SAVE") else [],
    )
    trainer.train()


if __name__ == "__main__":
    main()
