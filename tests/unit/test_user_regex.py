"""The one rule for a user's regular expression (`jobs.user_regex`): RE2 syntax, refused with a
reason a person can act on, and matched without backtracking: the patterns that take a
backtracking engine years on a 16 KiB line are answered here at once (pytest's timeout is the
only clock)."""

import pytest

from jobs.user_regex import MAX_PATTERN_CHARS, BadPattern, compile_user_regex

LINE = 16 * 1024
# A line of a's that fails at its last character, and one with 19 a's among 16 KiB.
ALMOST = "a" * (LINE - 1) + "!"
SPARSE = ("a" + "x" * 861) * 19 + "x" * (LINE - 19 * 862)


@pytest.mark.parametrize(
    ("pattern", "on_almost", "on_sparse"),
    [
        ("(a+)+$", False, False),
        ("(a|aa)+$", False, False),
        ("(a+)+!", True, False),
        ("(.*a){20}", True, False),
        ("(.*a){19}", True, True),
        ("(x|xy)*z", False, False),
        (".*.*.*.*.*x", False, True),
        ("(a{1,30}){1,30}b", False, False),
    ],
)
def test_patterns_that_backtrack_elsewhere_match_in_one_pass(
    pattern: str, on_almost: bool, on_sparse: bool
) -> None:
    regex = compile_user_regex(pattern)
    assert regex.found_in(ALMOST) is on_almost
    assert regex.found_in(SPARSE.encode()) is on_sparse


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(a{1,100}){1,100}b", "a repeat counts to at most 1000, nested repeats multiplied"),
        (r"(\w)\1", r"backreferences (\1) are not supported"),
        (r"end\Z", r"\Z is written \z"),
        ("(?=x)y", "lookahead and lookbehind"),
        ("(?<!x)y", "lookahead and lookbehind"),
        (r"\pL{1000}", "too large to match in bounded time and memory"),
        ("([", "not a valid regular expression: missing ]"),
        ("", "empty"),
        ("x" * (MAX_PATTERN_CHARS + 1), f"longer than {MAX_PATTERN_CHARS} characters"),
        ("a\x00b", "NUL"),
    ],
)
def test_a_refused_pattern_says_why(pattern: str, reason: str) -> None:
    with pytest.raises(BadPattern) as refused:
        compile_user_regex(pattern)
    assert reason in str(refused.value)


def test_the_syntax_users_write_works_on_text_and_on_utf8_bytes() -> None:
    line = "step 120 loss=0.3125 naïve ✓ ERROR: NCCL"
    for pattern in (r"loss=0\.31\d+", "^step", "NCCL$", "(?i)error:", r"\bna\Sve\b", "[✓]", r"\z"):
        regex = compile_user_regex(pattern)
        assert regex.found_in(line) and regex.found_in(line.encode()), pattern
    assert not compile_user_regex("^loss").found_in(line)


def test_with_capture_its_named_groups_are_read() -> None:
    regex = compile_user_regex(r"step (?P<step>\d+) loss=(?P<loss>[0-9.]+)", capture=True)
    found = regex.compiled.search("rank0: step 120 loss=0.3125")
    assert found is not None and found.groupdict() == {"step": "120", "loss": "0.3125"}
