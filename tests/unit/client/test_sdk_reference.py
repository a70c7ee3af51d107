"""docs/sdk.md is what `python -m client.reference` makes from the SDK's docstrings."""

from pathlib import Path

from client.reference import public_methods, render_reference
from client.sdk import Client

SDK_MD = Path(__file__).resolve().parents[3] / "docs" / "sdk.md"


def test_the_reference_is_current() -> None:
    assert SDK_MD.read_text() == render_reference(), (
        "docs/sdk.md is out of date: run .venv/bin/python -m client.reference > docs/sdk.md"
    )


def test_every_client_method_is_documented() -> None:
    text = SDK_MD.read_text()
    methods = public_methods(Client)
    assert methods and all(f"### `lb.{name}(" in text for name in methods)
    undocumented = [name for name in methods if not getattr(Client, name).__doc__]
    assert undocumented == []
