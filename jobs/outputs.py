"""A job's `outputs`: what a plain program writes in its working directory that Launchbay should
take as checkpoints or keep as artifacts, named by globs relative to that directory.

    outputs:
      checkpoints: ["snapshot.pt", "checkpoints/epoch_*.pt", "out/checkpoint-*"]
      artifacts: ["*.json", "lightning_logs/**"]     # null (the default): every file written

The globs are the shell's, per path part (`*`, `?`, `[a-z]`), plus `**` for any number of
directories; a `*` matches names that start with a dot too. The rule is written once here: the
API checks a spec with it, the worker matches with it (`worker.outputs`, `worker.workdir`).
"""

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_GLOBS = 64
MAX_GLOB_CHARS = 256
MAX_STEP = 2**31 - 1
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DIGITS = re.compile(r"\d+")


def normalize_glob(pattern: str) -> str:
    """`pattern` without a leading `./`, or ValueError: it must stay inside the directory."""
    text = pattern
    while text.startswith("./"):
        text = text[2:]
    parts = text.split("/")
    if not text or text.startswith("/") or "\\" in text or _CONTROL.search(text):
        raise ValueError(f"{pattern!r}: a glob is a relative path with '/' between its parts")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{pattern!r}: a glob stays inside the working directory (no '..')")
    return text


def _part_regex(part: str) -> str:
    out, i, n = [], 0, len(part)
    while i < n:
        char = part[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            j = i + 1
            if j < n and part[j] in "!^":
                j += 1
            if j < n and part[j] == "]":
                j += 1
            while j < n and part[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: a literal "["
                out.append(re.escape(char))
            else:
                body = part[i + 1 : j]
                negate = body[:1] in ("!", "^")
                members = (body[1:] if negate else body).replace("\\", "\\\\")
                members = members.replace("[", "\\[")
                out.append(("[^/" if negate else "[") + members + "]")
                i = j
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def compile_glob(pattern: str) -> re.Pattern[str]:
    """The regular expression a relative POSIX path must match in full."""
    parts = normalize_glob(pattern).split("/")
    pieces: list[str] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            pieces.append(".*" if last else "(?:[^/]+/)*")
        else:
            pieces.append(_part_regex(part) + ("" if last else "/"))
    try:
        return re.compile("".join(pieces))
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a glob: {exc}") from None


def glob_base(pattern: str) -> str:
    """The literal directories a glob starts with (`""`: the working directory itself), where a
    search for its matches may begin."""
    parts = normalize_glob(pattern).split("/")[:-1]
    literal = []
    for part in parts:
        if any(c in part for c in "*?["):
            break
        literal.append(part)
    return "/".join(literal)


def step_from_name(name: str, is_dir: bool) -> int | None:
    """The step a checkpoint's name says: its last run of digits (a file's without its
    extension: `epoch_3.pt` → 3, `checkpoint-608` → 608, `model.pt` → None)."""
    stem = name if is_dir or "." not in name[1:] else name[: name.rindex(".")]
    runs = _DIGITS.findall(stem)
    if not runs:
        return None
    value = int(runs[-1])
    return value if value <= MAX_STEP else None


Glob = Annotated[str, Field(min_length=1, max_length=MAX_GLOB_CHARS)]


class Outputs(BaseModel):
    """`checkpoints`: matches are registered as checkpoints (files or directories) once complete
    and no longer changing; `artifacts`: which files the program wrote in its working directory
    are kept as its artifacts when an attempt ends (null: every one)."""

    model_config = ConfigDict(extra="forbid")

    checkpoints: Annotated[list[Glob], Field(max_length=MAX_GLOBS)] = []
    artifacts: Annotated[list[Glob], Field(max_length=MAX_GLOBS)] | None = None

    @field_validator("checkpoints", "artifacts")
    @classmethod
    def _globs(cls, globs: list[str] | None) -> list[str] | None:
        if globs is None:
            return None
        for pattern in globs:
            compile_glob(pattern)
        return [normalize_glob(p) for p in globs]


class OutputMatcher:
    """A list of globs, compiled once."""

    def __init__(self, globs: list[str]) -> None:
        self.globs = list(globs)
        self._patterns = [compile_glob(g) for g in globs]

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def matches(self, rel: str) -> bool:
        return any(p.fullmatch(rel) for p in self._patterns)

    def bases(self) -> list[str]:
        """Where to search: the shortest base directories, none below another."""
        found = sorted({glob_base(g) for g in self.globs}, key=lambda base: (len(base), base))
        kept: list[str] = []
        for base in found:
            if not any(base == k or k == "" or base.startswith(k + "/") for k in kept):
                kept.append(base)
        return kept
