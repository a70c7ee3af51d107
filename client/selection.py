"""Which files of a directory `launchbay run` packs.

In a git work tree: what `git ls-files --cached --others --exclude-standard` lists there
(tracked files, and untracked ones that no `.gitignore`, `.git/info/exclude` or global excludes
file ignores), as `git status` sees the tree. Elsewhere (or without git): every file, less what
the `.gitignore` files of the directory and of its subdirectories ignore, read with the same
patterns (pathspec's `GitIgnoreSpec`); an ignored directory is not entered. Then what
`.launchbayignore` at the top of the directory ignores (gitignore syntax) is left out of either:
its `!pattern` lines take back only what its own lines left out.

Never packed, and named in `Selection.skipped` with the reason: symbolic links (not followed:
the server refuses links in an archive, and a link may point outside the directory), anything
but a regular file, and names the server cannot store (a backslash, bytes that are not UTF-8).
`.git/` is never entered.
"""

import os
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pathspec import GitIgnoreSpec

IGNORE_FILE = ".launchbayignore"
GITIGNORE = ".gitignore"
GIT_TIMEOUT_S = 60
GIT_LIST = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]


@dataclass
class Selection:
    """The files to pack (paths relative to the directory, with '/', sorted) and what was
    left out that a person may not expect: `(path, why)`."""

    files: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def select_files(root: Path) -> Selection:
    """The files of `root` to pack, by the rules of this module."""
    listed = _git_listing(root)
    candidates = _walk(root) if listed is None else _checked(root, listed)
    ignore = _spec_of(root / IGNORE_FILE)
    selection = Selection()
    for path, why in candidates:
        if ignore is not None and ignore.match_file(path):
            continue
        if why is None:
            selection.files.append(path)
        else:
            selection.skipped.append((path, why))
    selection.files.sort()
    return selection


def _git_listing(root: Path) -> list[str] | None:
    """The paths git lists under `root` (relative to it), or None when `root` is not in a
    git work tree or git is not installed."""
    try:
        inside = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
        if inside.returncode != 0 or inside.stdout.strip() != b"true":
            return None
        listed = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    names = (os.fsdecode(raw) for raw in listed.stdout.split(b"\0") if raw)
    return sorted(set(names))


def _checked(root: Path, listed: list[str]) -> Iterator[tuple[str, str | None]]:
    """git's paths, each with why it is not packed (None: it is). A tracked file deleted from
    the tree is left out; a path under a linked directory is a link."""
    real_root = root.resolve()
    parents: dict[str, bool] = {}
    for path in listed:
        parent = path.rpartition("/")[0]
        if parent not in parents:
            parents[parent] = (root / parent).resolve() == real_root / parent
        if not parents[parent]:
            yield path, "inside a symbolic link to a directory (not followed)"
            continue
        try:
            mode = os.lstat(root / path).st_mode
        except FileNotFoundError:
            continue
        yield path, _why_not(path, mode)


def _walk(root: Path) -> Iterator[tuple[str, str | None]]:
    """Every path under `root` with why it is not packed, less what `.gitignore` files
    ignore; sorted by directory, then name."""
    specs: list[tuple[str, GitIgnoreSpec]] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=_raise):
        relative_dir = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if relative_dir == "." else relative_dir + "/"
        specs = [(base, spec) for base, spec in specs if prefix.startswith(base)]
        own = _spec_of(Path(dirpath) / GITIGNORE)
        if own is not None:
            specs.append((prefix, own))
        kept = []
        for name in sorted(dirnames):
            path = prefix + name
            if name == ".git" or _ignored(specs, path + "/"):
                continue
            if os.path.islink(os.path.join(dirpath, name)):
                yield path, "a symbolic link (not followed)"
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            path = prefix + name
            if not _ignored(specs, path):
                yield path, _why_not(path, os.lstat(os.path.join(dirpath, name)).st_mode)


def _raise(exc: OSError) -> None:
    raise exc


def _ignored(specs: list[tuple[str, GitIgnoreSpec]], path: str) -> bool:
    """Whether the `.gitignore` files in force ignore `path` (a directory ends with '/'): the
    deepest file with a matching line decides, and in it the last such line, as in git."""
    for base, spec in reversed(specs):
        result = spec.check_file(path[len(base) :])
        if result.include is not None:
            return bool(result.include)
    return False


def _spec_of(path: Path) -> GitIgnoreSpec | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    return GitIgnoreSpec.from_lines(text.splitlines())


def _why_not(path: str, mode: int) -> str | None:
    """Why a path is not packed, or None when it is."""
    if stat.S_ISLNK(mode):
        return "a symbolic link (not followed)"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    if "\\" in path:
        return "a backslash in its name (the server refuses it)"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "a name that is not UTF-8"
    return None
