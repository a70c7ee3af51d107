"""Config models of the built-in recipes (a job spec's `config`), without torch.

The API validates a job's `config` against these before queueing it, and the recipe
validates LAUNCHBAY_CONFIG against the same model inside the ranks, so a bad value is
refused at submission rather than minutes later on a GPU node. Every field has a default:
``config: {}`` runs the recipe as shipped. Unknown fields are refused, not ignored.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TrainingConfig(BaseModel):
    """Fields every recipe shares. `batch_size` is per rank."""

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(default=3, ge=1, le=1000, description="Passes over the training split.")
    steps: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="Stop after this many optimizer steps; overrides `epochs` when set "
        "(as many epochs run as the steps need).",
    )
    batch_size: int = Field(default=32, ge=1, le=4096, description="Samples per rank per step.")
    lr: float = Field(default=1e-3, gt=0, le=10, description="Peak learning rate.")
    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="Seeds data split and init.")
    log_every_steps: int = Field(
        default=10, ge=1, le=1_000_000, description="Report the training loss every N steps."
    )
    val_fraction: float = Field(
        default=0.2, gt=0, lt=1, description="Share of the data held out for evaluation."
    )


class SyntheticConfig(TrainingConfig):
    """Linear regression on generated data: a fast job for tests and smoke checks."""

    epochs: int = Field(default=3, ge=1, le=1000, description="Passes over the training split.")
    lr: float = Field(default=0.1, gt=0, le=10, description="SGD learning rate.")
    log_every_steps: int = Field(
        default=5, ge=1, le=1_000_000, description="Report the training loss every N steps."
    )
    val_fraction: float = Field(
        default=0.25, gt=0, lt=1, description="Share of the data held out for evaluation."
    )
    num_samples: int = Field(default=768, ge=8, le=10_000_000, description="Generated samples.")
    features: int = Field(default=8, ge=1, le=4096, description="Input features.")
    noise: float = Field(default=0.05, ge=0, le=100, description="Std of the label noise.")
    fail_on_rank: int | None = Field(
        default=None,
        ge=0,
        description="Raise RuntimeError('synthetic failure on rank N') on this rank "
        "after its first step (to test failure handling).",
    )
    sleep_per_step_s: float = Field(
        default=0.0, ge=0, le=60, description="Sleep after each step, to make a job run longer."
    )


class DigitsConfig(TrainingConfig):
    """A small CNN on scikit-learn's 8x8 handwritten digits (1,797 images, 10 classes)."""

    epochs: int = Field(default=10, ge=1, le=1000, description="Passes over the training split.")
    lr: float = Field(default=6e-3, gt=0, le=10, description="Peak AdamW learning rate.")
    weight_decay: float = Field(default=1e-4, ge=0, le=1, description="AdamW weight decay.")
    channels: int = Field(default=16, ge=1, le=512, description="Width of the first conv layer.")


class TextConfig(TrainingConfig):
    """A bag-of-n-grams text classifier trained on a `text,label` CSV file."""

    csv_path: str | None = Field(
        default=None,
        min_length=1,
        description="CSV with a header row: absolute, or relative to the job's run "
        "directory. Default: the shipped VADER sentiment lexicon (positive/negative).",
    )
    text_column: str = Field(default="text", min_length=1, description="Column with the text.")
    label_column: str = Field(default="label", min_length=1, description="Column with the label.")
    epochs: int = Field(default=4, ge=1, le=1000, description="Passes over the training split.")
    batch_size: int = Field(default=64, ge=1, le=4096, description="Samples per rank per step.")
    lr: float = Field(default=0.02, gt=0, le=10, description="Peak AdamW learning rate.")
    embed_dim: int = Field(default=64, ge=2, le=4096, description="Embedding width.")
    ngram_min: int = Field(default=2, ge=1, le=10, description="Shortest character n-gram.")
    ngram_max: int = Field(default=5, ge=1, le=10, description="Longest character n-gram.")
    min_count: int = Field(
        default=2, ge=1, le=1_000_000, description="Drop features seen fewer times in training."
    )
    max_vocab: int = Field(
        default=50_000, ge=16, le=5_000_000, description="Keep this many most frequent features."
    )

    @model_validator(mode="after")
    def _ngram_range_is_ordered(self) -> Self:
        if self.ngram_min > self.ngram_max:
            raise ValueError("ngram_min must not exceed ngram_max")
        return self
