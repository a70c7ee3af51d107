"""The text recipe's CSV reader, tokenizer and vocabulary, and its shipped data."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.recipes.textdata import (
    DEFAULT_CSV,
    UNKNOWN,
    Vocab,
    read_labelled_csv,
    resolve_csv_path,
    text_features,
)


def test_features_are_words_and_their_character_ngrams() -> None:
    assert text_features("Hi, Bo", 2, 3) == [
        "w:hi", "<h", "hi", "i>", "<hi", "hi>",
        "w:,", "<,", ",>", "<,>",
        "w:bo", "<b", "bo", "o>", "<bo", "bo>",
    ]  # fmt: skip
    assert text_features("", 2, 3) == []


def test_vocab_comes_from_training_text_in_a_stable_order() -> None:
    docs = [["b", "a", "a"], ["c", "b", "a"], ["d"]]
    vocab = Vocab.build(docs, min_count=1, max_vocab=3)
    assert vocab.tokens == (UNKNOWN, "a", "b"), "most frequent first, ties by name"
    assert Vocab.build(list(reversed(docs)), min_count=1, max_vocab=3) == vocab
    assert Vocab.build(docs, min_count=2, max_vocab=100).tokens == (UNKNOWN, "a", "b")
    assert vocab.encode(["b", "zzz", "a"]) == [2, 1]
    assert vocab.encode(["zzz"]) == [0], "an all-unknown text still has one feature"


def test_csv_paths_resolve_against_the_run_directory(tmp_path: Path) -> None:
    assert resolve_csv_path(None) == DEFAULT_CSV
    assert resolve_csv_path("data/x.csv", cwd=tmp_path) == tmp_path / "data" / "x.csv"
    assert resolve_csv_path("/srv/x.csv", cwd=tmp_path) == Path("/srv/x.csv")


def test_reading_a_csv(tmp_path: Path) -> None:
    path = tmp_path / "reviews.csv"
    path.write_text('text,label,extra\n"good, really",pos,1\n,neg,2\nawful,neg,3\n')
    assert read_labelled_csv(path, "text", "label") == [("good, really", "pos"), ("awful", "neg")]
    with pytest.raises(ValueError, match="missing column"):
        read_labelled_csv(path, "review", "label")
    with pytest.raises(FileNotFoundError):
        read_labelled_csv(tmp_path / "none.csv", "text", "label")
    path.write_text("text,label\na,pos\nb,pos\n")
    with pytest.raises(ValueError, match="two distinct labels"):
        read_labelled_csv(path, "text", "label")


def test_the_shipped_sentiment_data() -> None:
    rows = read_labelled_csv(DEFAULT_CSV, "text", "label")
    labels = [label for _, label in rows]
    assert len(rows) == 5830
    assert (labels.count("positive"), labels.count("negative")) == (2580, 3250)
    assert ("calming", "positive") in rows and ("cancer", "negative") in rows
    assert (DEFAULT_CSV.parent / "README.md").read_text().count("MIT License") >= 1
