"""The transformers docs' Trainer example (docs "Trainer" / "Fine-tune a pretrained model"), run
unmodified but for what this machine lacks: the model is built from a config (no Hub), the data
is a small in-memory dataset and no push to the Hub. Nothing of Launchbay's is imported."""

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class TinyDataset(torch.utils.data.Dataset):
    def __init__(self, size: int = 64) -> None:
        generator = torch.Generator().manual_seed(0)
        self.input_ids = torch.randint(5, 100, (size, 16), generator=generator)
        self.labels = (self.input_ids[:, 0] > 50).long()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.input_ids[index], "labels": self.labels[index]}


config = BertConfig(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    num_labels=2,
)
model = BertForSequenceClassification(config)

training_args = TrainingArguments(
    output_dir="my_awesome_model",
    learning_rate=2e-5,
    per_device_train_batch_size=4,
    per_device_eval_batch_size=4,
    num_train_epochs=1,
    weight_decay=0.01,
    eval_strategy="epoch",
    save_strategy="epoch",
    load_best_model_at_end=True,
    push_to_hub=False,
)

trainer = Trainer(
    model=model,
    args=training_args,
    train_dataset=TinyDataset(),
    eval_dataset=TinyDataset(16),
)

trainer.train()
