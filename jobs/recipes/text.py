"""Recipe `text`: a bag-of-character-n-grams text classifier on a `text,label` CSV.

fastText-style: the mean embedding of a text's word and character n-gram features, then
a linear layer. The tokenizer and vocabulary are built from the training split
(jobs.recipes.textdata). Default data: the shipped VADER sentiment lexicon, labelled
positive/negative (see jobs/recipes/data/README.md).
Run: ``torchrun --nproc_per_node 2 -m jobs.recipes.text``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from sklearn.model_selection import train_test_split
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record

from jobs import runtime as lb
from jobs.recipes.configs import TextConfig
from jobs.recipes.loop import evaluate_classifier, fit, plan_total_steps, say
from jobs.recipes.textdata import Vocab, read_labelled_csv, resolve_csv_path, text_features
from jobs.runtime import DistContext

Example = tuple[torch.Tensor, int]
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class BagOfNgrams(nn.Module):
    def __init__(self, vocab_size: int, embed_dim: int, num_classes: int) -> None:
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, mode="mean")
        self.classifier = nn.Linear(embed_dim, num_classes)

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.embedding(ids, offsets))


def collate(examples: list[Example]) -> Batch:
    """Concatenate the examples' ids with their start offsets, as EmbeddingBag takes them."""
    lengths = torch.tensor([len(ids) for ids, _ in examples])
    offsets = torch.cumsum(lengths, 0) - lengths
    labels = torch.tensor([label for _, label in examples], dtype=torch.long)
    return torch.cat([ids for ids, _ in examples]), offsets, labels


def build_datasets(config: TextConfig) -> tuple[list[Example], list[Example], Vocab, list[str]]:
    """Train and held-out examples, the training vocabulary and the label names.

    Every rank computes the same split and vocabulary from the same seed and file.
    """
    path = resolve_csv_path(config.csv_path)
    rows = read_labelled_csv(path, config.text_column, config.label_column)
    labels = sorted({label for _, label in rows})
    label_ids = [labels.index(label) for _, label in rows]
    try:
        train_rows, val_rows = train_test_split(
            rows, test_size=config.val_fraction, random_state=config.seed, stratify=label_ids
        )
    except ValueError:  # a class too small to stratify: plain random split
        train_rows, val_rows = train_test_split(
            rows, test_size=config.val_fraction, random_state=config.seed
        )
    featurize = [
        [text_features(text, config.ngram_min, config.ngram_max) for text, _ in part]
        for part in (train_rows, val_rows)
    ]
    vocab = Vocab.build(featurize[0], config.min_count, config.max_vocab)

    def examples(part: list[tuple[str, str]], features: list[list[str]]) -> list[Example]:
        return [
            (torch.tensor(vocab.encode(f), dtype=torch.long), labels.index(label))
            for (_, label), f in zip(part, features, strict=True)
        ]

    return (
        examples(train_rows, featurize[0]),
        examples(val_rows, featurize[1]),
        vocab,
        labels,
    )


def train(config: TextConfig, ctx: DistContext) -> int:
    lb.seed_everything(config.seed)
    train_set, val_set, vocab, labels = build_datasets(config)
    model = lb.prepare_model(BagOfNgrams(len(vocab), config.embed_dim, len(labels)), ctx)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    loader = lb.make_loader(
        train_set, config.batch_size, shuffle=True, seed=config.seed, ctx=ctx, collate_fn=collate
    )
    val_loader = lb.make_loader(val_set, 512, shuffle=False, seed=0, ctx=ctx, collate_fn=collate)
    total = plan_total_steps(lb.batches_per_epoch(loader), config.epochs, config.steps)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=config.lr, total_steps=total, pct_start=0.1
    )
    say(
        ctx,
        f"text: {len(train_set)} train / {len(val_set)} held-out texts, "
        f"{len(labels)} labels, vocabulary {len(vocab)}, {total} steps, "
        f"world {ctx.world_size} on {ctx.device}",
    )

    def forward(net: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        ids, offsets, y = (t.to(ctx.device) for t in batch)
        return net(ids, offsets), y

    def loss_fn(net: nn.Module, batch: Batch) -> torch.Tensor:
        logits, y = forward(net, batch)
        return F.cross_entropy(logits.float(), y)

    return fit(
        ctx=ctx,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        train_loader=loader,
        loss_fn=loss_fn,
        evaluate=lambda: evaluate_classifier(ctx, model, val_loader, len(val_set), forward),
        total_steps=total,
        log_every_steps=config.log_every_steps,
        # What it takes to use the weights later: feature strings and label names by id.
        extra={
            "vocab": list(vocab.tokens),
            "labels": labels,
            "ngram_range": [config.ngram_min, config.ngram_max],
        },
    )


@record
def main() -> None:
    config = TextConfig.model_validate(lb.read_config())
    with lb.distributed() as ctx:
        train(config, ctx)


if __name__ == "__main__":
    main()
