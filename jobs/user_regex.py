r"""The one rule for a regular expression a user gives Launchbay: a log search's pattern
(`GET /v1/jobs/{id}/logs?q=&regex=true`, `GET /v1/logs`) and, when it comes, each pattern of a
job spec's `log_metrics`.

A user's pattern is RE2 syntax (https://github.com/google/re2/wiki/Syntax): Python's `re`
syntax without backreferences, lookahead or lookbehind, and with `\z` for Python's `\Z`. RE2
matches without backtracking, in time linear in the text whatever the pattern, and releases
the GIL while it matches, so no pattern can freeze the other threads of the process. What it
cannot match in bounded time and memory it refuses when compiling: a repeat count over 1000
(nested repeats multiplied: `(a{1,100}){1,100}`), a program over `MAX_MEM_BYTES`.

    compile_user_regex(pattern)                a UserRegex, or BadPattern with the reason
    compile_user_regex(pattern, capture=True)  the same with its groups (named groups for
                                               `log_metrics`): `.compiled.search(line)`
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import re2

MAX_PATTERN_CHARS = 256
# RE2's budget for one compiled pattern: its program (2/3 of it) and its DFA's state cache.
# It bounds the per-character cost of a match; RE2 refuses a pattern whose program is larger.
MAX_MEM_BYTES = 2 << 20

# RE2's own error text, first words, and what a user would want to know about it.
_HINTS = {
    "invalid escape sequence": "backreferences (\\1) are not supported, and \\Z is written \\z",
    "invalid perl operator": "lookahead and lookbehind ((?=, (?!, (?<=, (?<!) are not supported",
    "invalid repetition size": "a repeat counts to at most 1000, nested repeats multiplied",
}


class BadPattern(ValueError):
    """The pattern is refused: empty, too long, not RE2 syntax, or too large."""


@dataclass(frozen=True, eq=False)
class UserRegex:
    """A checked user pattern, compiled by RE2 (`compiled`: the `re2` module's pattern)."""

    pattern: str
    compiled: Any

    def found_in(self, text: str | bytes) -> bool:
        """Whether the pattern matches somewhere in `text` (bytes: UTF-8)."""
        return self.compiled.search(text) is not None


@lru_cache(maxsize=64)
def compile_user_regex(pattern: str, *, capture: bool = False) -> UserRegex:
    """The pattern, checked and compiled (BadPattern otherwise). Without `capture`, RE2 keeps
    no positions of unnamed groups: a yes/no search needs none, and matches faster."""
    if not pattern:
        raise BadPattern("the pattern is empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise BadPattern(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
    if "\x00" in pattern:
        raise BadPattern("the pattern holds a NUL character")
    options = re2.Options()
    options.max_mem = MAX_MEM_BYTES
    options.log_errors = False
    options.never_capture = not capture
    try:
        compiled = re2.compile(pattern, options)
    except re2.error as exc:
        raise BadPattern(_reason(exc)) from None
    return UserRegex(pattern, compiled)


def _reason(exc: Exception) -> str:
    detail = exc.args[0] if exc.args else str(exc)
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    if detail.startswith("pattern too large"):
        return "the pattern is too large to match in bounded time and memory"
    hint = next((h for start, h in _HINTS.items() if detail.startswith(start)), None)
    reason = f"not a valid regular expression: {detail}"
    return f"{reason} (RE2 syntax: {hint})" if hint else reason
