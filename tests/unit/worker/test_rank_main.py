"""The rank entry's command line and error text."""

from pathlib import Path

import pytest

from worker.rank_main import format_error, local_rank_flag, parse_argv


def test_parse_argv() -> None:
    assert parse_argv(["--log-dir", "/l", "--module", "m", "--module", "x"]) == (
        Path("/l"),
        None,
        "module",
        "m",
        ["--module", "x"],
    )
    assert parse_argv(["--log-dir", "/l", "--local-rank-arg", "--script", "t.py", "-a"]) == (
        Path("/l"),
        "auto",
        "script",
        "t.py",
        ["-a"],
    )


def test_the_local_rank_spelling_is_chosen_or_read_from_the_script(tmp_path: Path) -> None:
    argv = ["--log-dir", "/l", "--local-rank-arg=underscore", "--script", "t.py"]
    assert parse_argv(argv)[1] == "underscore"
    tutorial = tmp_path / "tutorial.py"
    tutorial.write_text('parser.add_argument("--local_rank", type=int, default=-1)\n')
    both = tmp_path / "both.py"
    both.write_text('parser.add_argument("--local-rank", "--local_rank", type=int)\n')
    assert local_rank_flag("auto", "script", str(tutorial)) == "--local_rank"
    assert local_rank_flag("auto", "script", str(both)) == "--local-rank"
    assert local_rank_flag("auto", "module", "jobs.recipes.digits") == "--local-rank"
    assert local_rank_flag("auto", "script", str(tmp_path / "missing.py")) == "--local-rank"
    assert local_rank_flag("dash", "script", str(tutorial)) == "--local-rank"
    assert local_rank_flag("underscore", "module", "m") == "--local_rank"


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
