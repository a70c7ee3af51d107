"""Derive vader_sentiment.csv (text,label) from VADER's vader_lexicon.txt.

The lexicon (vaderSentiment package, MIT licence) lists 7,500 words, emoticons and slang
terms with the mean of ten human sentiment ratings on a -4..+4 scale. Entries rated at
least MIN_ABS_RATING away from neutral become `positive` or `negative`; the rest are
dropped as too neutral to label. Usage:

    pip download --no-deps vaderSentiment==3.3.2 -d /tmp/vader
    python -m zipfile -e /tmp/vader/vaderSentiment-3.3.2-py2.py3-none-any.whl /tmp/vader/x
    python jobs/recipes/data/make_vader_csv.py /tmp/vader/x/vaderSentiment/vader_lexicon.txt
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

MIN_ABS_RATING = 1.0
OUTPUT = Path(__file__).with_name("vader_sentiment.csv")


def derive_rows(lexicon: Path) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for line in lexicon.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        if len(fields) < 2 or not fields[0].strip():
            continue
        mean = float(fields[1])
        if abs(mean) >= MIN_ABS_RATING:
            rows.append((fields[0], "positive" if mean > 0 else "negative"))
    return rows


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: make_vader_csv.py PATH/TO/vader_lexicon.txt")
    rows = derive_rows(Path(argv[0]))
    with OUTPUT.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {OUTPUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
