"""Data side of the `text` recipe: the CSV reader, tokenizer and vocabulary (no torch).

The tokenizer is deliberately simple and self-contained (no download): lower-cased words
plus the character n-grams of each word, fastText-style. The n-grams let the model score
words it never saw in training from their pieces ("calm" in `calming` and `calmness`).
The vocabulary comes from the training split only, so held-out text is scored honestly.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_CSV = Path(__file__).with_name("data") / "vader_sentiment.csv"
UNKNOWN = "<unk>"
_WORDS = re.compile(r"\w+|[^\w\s]+")


def resolve_csv_path(csv_path: str | None, cwd: Path | None = None) -> Path:
    """The CSV to read: the shipped default, an absolute path, or one relative to the
    working directory (the job's run directory, where uploaded code is unpacked)."""
    if csv_path is None:
        return DEFAULT_CSV
    path = Path(csv_path).expanduser()
    return path if path.is_absolute() else (cwd or Path.cwd()) / path


def read_labelled_csv(path: Path, text_column: str, label_column: str) -> list[tuple[str, str]]:
    """(text, label) rows of a CSV with a header row; rows with an empty text are skipped."""
    if not path.is_file():
        raise FileNotFoundError(f"text recipe: no CSV file at {path}")
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        missing = [c for c in (text_column, label_column) if c not in columns]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; header is {columns}")
        rows = [
            (row[text_column], row[label_column].strip())
            for row in reader
            if (row[text_column] or "").strip() and (row[label_column] or "").strip()
        ]
    labels = {label for _, label in rows}
    if len(labels) < 2:
        raise ValueError(f"{path}: need at least two distinct labels, found {sorted(labels)}")
    return rows


def text_features(text: str, ngram_min: int, ngram_max: int) -> list[str]:
    """Word tokens (prefixed "w:") and the character n-grams of each word in "<word>"."""
    features: list[str] = []
    for word in _WORDS.findall(text.lower()):
        features.append("w:" + word)
        padded = f"<{word}>"
        for n in range(ngram_min, ngram_max + 1):
            features.extend(padded[i : i + n] for i in range(len(padded) - n + 1))
    return features


@dataclass(frozen=True)
class Vocab:
    """Feature strings to ids; id 0 is the unknown feature."""

    tokens: tuple[str, ...]
    index: dict[str, int] = field(repr=False, compare=False)

    @classmethod
    def from_tokens(cls, tokens: Sequence[str]) -> Vocab:
        return cls(tuple(tokens), {token: i for i, token in enumerate(tokens)})

    @classmethod
    def build(cls, documents: Iterable[list[str]], min_count: int, max_vocab: int) -> Vocab:
        """The `max_vocab` - 1 most frequent features seen at least `min_count` times.

        Ties are broken by the feature itself so every rank builds the same vocabulary.
        """
        counts = Counter(feature for document in documents for feature in document)
        kept = sorted(
            (f for f, c in counts.items() if c >= min_count), key=lambda f: (-counts[f], f)
        )
        return cls.from_tokens([UNKNOWN, *kept[: max_vocab - 1]])

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, features: Iterable[str]) -> list[int]:
        """Ids of the known features; [0] (unknown) when none is known."""
        ids = [self.index[f] for f in features if f in self.index]
        return ids or [0]
