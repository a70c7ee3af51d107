"""Declared outputs: the files and directories of the working directory that the spec's
`outputs.checkpoints` globs name (`jobs.outputs`), registered as checkpoints once complete and
no longer changing, so that a plain program that writes ``./model.pt`` or
``./checkpoints/epoch_3.pt`` has them registered without reporting anything.

Every `SCAN_S` the supervisor looks at what the globs match (`DeclaredOutputs.poll`: a walk
from the globs' literal directories, links never followed). A match is handed to the
registrar (`worker.checkpoints.CheckpointRegistrar.add_declared`, with the step its name says)
once it has looked the same for `QUIET_S` (`DIR_QUIET_S` for a directory, whose files a
framework writes one after another) and no process holds a file of it open for writing; a
match that changes later (a `snapshot.pt` saved again) is handed over again. When the ranks
are gone (`final`) every match not yet handed over in its present state is, at once.

With `capture: off` nothing is registered this way (`wants_declared_outputs`).
"""

import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jobs.outputs import OutputMatcher, step_from_name
from jobs.spec import JobSpec
from service.artifacts.tree import TreeRefused, scan_tree
from worker.checkpoint_checks import CheckpointRejected, Signature, open_for_writing, signature
from worker.checkpoints import CheckpointRegistrar

log = logging.getLogger(__name__)

SCAN_S = 0.5
QUIET_S = 1.0
DIR_QUIET_S = 2.0
# A scan looks at no more entries than this (a program that writes a dataset into its working
# directory must not turn each scan into a walk of a million files).
MAX_SCAN_ENTRIES = 100_000


def wants_declared_outputs(spec: JobSpec) -> bool:
    """Whether the job declares checkpoints to find (not with `capture: off`)."""
    if getattr(spec, "capture", "auto") == "off":
        return False
    return spec.outputs is not None and bool(spec.outputs.checkpoints)


def find_matches(root: Path, matcher: OutputMatcher) -> list[tuple[str, bool]]:
    """(relative path, is a directory) of what `matcher` names under `root`; a matching
    directory is not looked into, a symbolic link never followed nor matched."""
    found: list[tuple[str, bool]] = []
    seen = 0
    for base in matcher.bases():
        top = root / base if base else root
        if top.is_symlink() or not top.is_dir():
            continue
        for directory, dirs, files in os.walk(top, followlinks=False):
            rel_dir = Path(directory).relative_to(root).as_posix()
            prefix = "" if rel_dir == "." else rel_dir + "/"
            seen += len(dirs) + len(files)
            for name in files:
                if matcher.matches(prefix + name):
                    if stat.S_ISREG(os.lstat(os.path.join(directory, name)).st_mode):
                        found.append((prefix + name, False))
            for name in list(dirs):
                if matcher.matches(prefix + name):
                    dirs.remove(name)
                    if not os.path.islink(os.path.join(directory, name)):
                        found.append((prefix + name, True))
            if seen > MAX_SCAN_ENTRIES:
                log.warning("%s: more than %d entries; the scan stops", root, MAX_SCAN_ENTRIES)
                return found
    return found


@dataclass
class _Seen:
    signature: Signature
    since: float
    handed: Signature | None = None


class DeclaredOutputs:
    """The declared checkpoints of one attempt's working directory (see the module docstring)."""

    def __init__(self, work_dir: Path, globs: list[str], registrar: CheckpointRegistrar) -> None:
        self.work_dir = work_dir
        self.matcher = OutputMatcher(globs)
        self.registrar = registrar
        self.seen: dict[str, _Seen] = {}
        self.next_scan = 0.0

    def poll(self, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now < self.next_scan:
            return
        self.next_scan = now + SCAN_S
        for rel, is_dir in find_matches(self.work_dir, self.matcher):
            path = self.work_dir / rel
            try:
                signed = signature(path)
            except CheckpointRejected:
                continue  # empty, or holding what a checkpoint cannot (a link): not yet one
            entry = self.seen.get(rel)
            if entry is None or entry.signature != signed:
                handed = entry.handed if entry is not None else None
                entry = self.seen[rel] = _Seen(signed, now, handed)
            if entry.handed == signed:
                continue
            quiet = DIR_QUIET_S if is_dir else QUIET_S
            if not final and (now - entry.since < quiet or _being_written(path, is_dir)):
                continue
            entry.handed = signed
            self.registrar.add_declared(rel, step_from_name(path.name, is_dir))


def _being_written(path: Path, is_dir: bool) -> bool:
    if not is_dir:
        return open_for_writing(path)
    try:
        return any(open_for_writing(path / f.path) for f in scan_tree(path))
    except (TreeRefused, OSError):
        return True


def _under(matcher: OutputMatcher, rel: str) -> bool:
    """Whether `rel` or a directory above it matches."""
    parts = rel.split("/")
    return any(matcher.matches("/".join(parts[:i])) for i in range(1, len(parts) + 1))


def kept_as_artifacts(spec: JobSpec) -> Callable[[str], bool]:
    """Which files the program wrote in its working directory are kept as its artifacts: those
    `outputs.artifacts` names (or inside a directory it names; every file when it is null),
    except the declared checkpoints, which are registered as such."""
    outputs = spec.outputs
    declared = outputs.checkpoints if outputs is not None and wants_declared_outputs(spec) else []
    checkpoints = OutputMatcher(declared)
    artifacts = None
    if outputs is not None and outputs.artifacts is not None:
        artifacts = OutputMatcher(outputs.artifacts)

    def wanted(rel: str) -> bool:
        if checkpoints and _under(checkpoints, rel):
            return False
        return artifacts is None or _under(artifacts, rel)

    return wanted
