"""The rank entry's command line and error text."""

from pathlib import Path

import pytest

from worker.rank_main import format_error, parse_argv


def test_parse_argv() -> None:
    assert parse_argv(["--log-dir", "/l", "--module", "m", "--module", "x"]) == (
        Path("/l"),
        False,
        "module",
        "m",
        ["--module", "x"],
    )
    assert parse_argv(["--log-dir", "/l", "--local-rank-arg", "--script", "t.py", "-a"]) == (
        Path("/l"),
        True,
        "script",
        "t.py",
        ["-a"],
    )


@pytest.mark.parametrize(
    "argv", [[], ["--script", "t.py"], ["--log-dir", "/l"], ["--log-dir", "/l", "t.py"]]
)
def test_bad_argv(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_argv(argv)


def test_format_error_keeps_the_chain() -> None:
    try:
        try:
            raise KeyError("inner")
        except KeyError as exc:
            raise RuntimeError("outer") from exc
    except RuntimeError as exc:
        summary, text = format_error(exc)
    assert summary == "RuntimeError: outer"
    assert "KeyError: 'inner'" in text and text.rstrip().endswith("RuntimeError: outer")
