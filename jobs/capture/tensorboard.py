"""TensorBoard scalars as metrics: rank 0 reads the event files the program writes under its
working directory and `LAUNCHBAY_OUTPUT_DIR`, and appends what they hold to its events file
(`{"type": "metric", "step", "metrics", "ts"}` lines: the scalar's step and wall time).

- Found by name (``events.out.tfevents.*``) in a bounded walk that follows no link and skips
  hidden directories; directories a framework integration already reports from (Trainer's
  `logging_dir`, a Lightning `TensorBoardLogger`'s) are skipped, so nothing is recorded twice.
- Read from where the last pass stopped; a record still being written waits. How far each
  file was read is kept in the checkpoint directory (``.launchbay-tensorboard.json``), which
  the worker carries to the next attempt's (`worker.carried_state`), so a retried attempt does
  not read again what an earlier one did.
  Files and skipped directories are known by their path below the root they lie in: what an
  attempt wrote to its working directory is under the output dir for the next one (the worker
  keeps it there under the same path), and is the same file.
- A scalar's name is its tag (`add_scalars`' ``loss_train/`` directories give `loss/train`).
- Scalars of one step that follow each other go in one line (at most `MAX_PER_LINE`); a step
  or a name the events file cannot hold (a negative step, a 200-character tag, NaN) is skipped
  and said once. The reader runs in the rank, inside the job's memory and CPU: it holds a
  bounded chunk of a file at a time, and paces itself (`pause_after`).
- A job's TensorBoard files add at most `max_points` scalars to its metrics, all its attempts
  together (the worker's LAUNCHBAY_TENSORBOARD_MAX_POINTS); past it the rest is not read, and
  the log says so.
"""

import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from .tfevents import BadRecord, Records, Scalar, event_scalars, split_records

PREFIX = "events.out.tfevents."
STATE_FILE = ".launchbay-tensorboard.json"
MAX_PER_LINE = 1000
MAX_NAME = 128  # jobs.contract.events.MAX_METRIC_NAME
SYSTEM_PREFIX = "system/"  # jobs.contract.system_metrics.SYSTEM_PREFIX: Launchbay's own names
MAX_STEP = 2**31 - 1  # jobs.contract.events.MAX_INT32
READ_BYTES = 4 << 20
MAX_WALK_ENTRIES = 20_000
DEFAULT_MAX_POINTS = 1_000_000  # the worker's LAUNCHBAY_TENSORBOARD_MAX_POINTS
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages"})


def find_event_files(
    roots: Iterable[Path], skip: Callable[[Path], bool]
) -> tuple[list[Path], bool]:
    """(the event files under `roots`, whether the walk stopped at `MAX_WALK_ENTRIES`)."""
    found: list[Path] = []
    seen = 0
    pending = [Path(root) for root in roots]
    while pending:
        directory = pending.pop()
        if skip(directory):
            continue
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_WALK_ENTRIES:
                        return found, True
                    if entry.is_dir(follow_symlinks=False):
                        if not entry.name.startswith(".") and entry.name not in SKIP_DIRS:
                            pending.append(Path(entry.path))
                    elif entry.name.startswith(PREFIX) and entry.is_file(follow_symlinks=False):
                        found.append(Path(entry.path))
        except OSError:
            continue
    return found, False


class EventLines:
    """Scalars grouped into the events file's metric lines, checked as the worker checks them."""

    def __init__(self, note: Callable[[str], None]) -> None:
        self.note = note
        self.lines: list[str] = []
        self._step: int | None = None
        self._ts = 0.0
        self._metrics: dict[str, float] = {}
        self._said: set[str] = set()
        self.points = 0

    def _say_once(self, kind: str, message: str) -> None:
        if kind not in self._said:
            self._said.add(kind)
            self.note(message)

    def add(self, scalar: Scalar) -> None:
        if not 0 <= scalar.step <= MAX_STEP:
            self._say_once("step", f"TensorBoard scalars with step {scalar.step} skipped")
            return
        name = scalar.tag
        if not name or len(name) > MAX_NAME or "\x00" in name:
            self._say_once("name", f"TensorBoard tags over {MAX_NAME} characters skipped")
            return
        if name.startswith(SYSTEM_PREFIX):
            self._say_once("system", f"TensorBoard tags under {SYSTEM_PREFIX!r} skipped ({name!r})")
            return
        if not math.isfinite(scalar.value):
            self._say_once("value", f"non-finite TensorBoard values skipped ({name!r})")
            return
        if scalar.step != self._step or name in self._metrics or len(self._metrics) >= MAX_PER_LINE:
            self.end_line()
            self._step = scalar.step
            self._ts = scalar.wall_time if math.isfinite(scalar.wall_time) else time.time()
        self._metrics[name] = scalar.value
        self.points += 1

    def end_line(self) -> None:
        if self._metrics:
            line = {"type": "metric", "step": self._step, "metrics": self._metrics, "ts": self._ts}
            self.lines.append(json.dumps(line, separators=(",", ":")))
        self._metrics = {}

    def take(self) -> list[str]:
        self.end_line()
        lines, self.lines = self.lines, []
        return lines


def _named(scalar: Scalar, directory: str) -> Scalar:
    """`SummaryWriter.add_scalars("loss", {"train": ..., "val": ...})` writes tag `loss` into
    directories ``loss_train`` and ``loss_val``: those are metrics `loss/train`, `loss/val`."""
    prefix = scalar.tag.replace("/", "_") + "_"
    if directory.startswith(prefix) and len(directory) > len(prefix):
        return Scalar(
            f"{scalar.tag}/{directory[len(prefix) :]}", scalar.step, scalar.wall_time, scalar.value
        )
    return scalar


class TensorBoardReader:
    """One rank's reader of the job's TensorBoard files (see the module docstring)."""

    def __init__(
        self,
        roots: Iterable[Path],
        events_file: Path,
        state_file: Path | None,
        skip: Callable[[Path], bool],
        note: Callable[[str], None],
        max_points: int = DEFAULT_MAX_POINTS,
    ) -> None:
        # The most specific root first: a path is known below the deepest root holding it.
        self.roots = sorted((Path(r) for r in roots), key=lambda r: -len(r.parts))
        self.events_file = events_file
        self.state_file = state_file
        self.skip = skip
        self.note = note
        self.lines = EventLines(note)
        self.max_points = max_points
        self.offsets: dict[str, int] = {}
        self.earlier_points = 0  # taken by earlier attempts of the job
        # Directories skipped, by this attempt or an earlier one (`remember_skip`).
        self.skipped: set[str] = set()
        self._lock = threading.Lock()  # the state: the reading thread's and the program's
        self._load_state()
        self.broken: set[str] = set()
        self._said_walk = False
        self.pause_after = 2.0  # seconds to wait after a pass (`pass_once` sets it)

    @property
    def full(self) -> bool:
        return self.earlier_points + self.lines.points >= self.max_points

    def _load_state(self) -> None:
        if self.state_file is None:
            return
        try:
            state = json.loads(self.state_file.read_text())
            files = state["files"]
            self.offsets = {str(k): int(v) for k, v in files.items() if isinstance(v, int)}
            self.earlier_points = int(state["points"])
            self.skipped = {str(d) for d in state["skip"]}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return

    def key(self, path: Path | str) -> str:
        """`path` as known across attempts: below its root (module docstring), else whole."""
        for root in self.roots:
            try:
                return Path(path).relative_to(root).as_posix()
            except ValueError:
                continue
        return str(path)

    def remember_skip(self, directory: str) -> None:
        """A framework reports what it writes under `directory`: kept for later attempts too,
        whose reading starts before their program says so again."""
        with self._lock:
            self.skipped.add(self.key(directory))
        self._save_state()

    def _skipped(self, directory: Path) -> bool:
        return self.key(directory) in self.skipped or self.skip(directory)

    def _save_state(self) -> None:
        if self.state_file is None:
            return
        with self._lock:
            state = {
                "files": dict(self.offsets),
                "points": self.earlier_points + self.lines.points,
                "skip": sorted(self.skipped),
            }
            temp = self.state_file.with_name(f"{self.state_file.name}.{os.getpid()}.tmp")
            try:
                temp.write_text(json.dumps(state))
                os.replace(temp, self.state_file)
            except OSError:
                pass

    def pass_once(self, *, budget_s: float | None = None) -> int:
        """Read what is new in every event file and append it as metric lines; the number of
        scalars taken. With `budget_s`, stop reading once that long has passed."""
        began = time.monotonic()
        if self.full:
            return 0
        files, cut = find_event_files(self.roots, self._skipped)
        if cut and not self._said_walk:
            self._said_walk = True
            self.note(f"TensorBoard files looked for in the first {MAX_WALK_ENTRIES} entries only")
        before = self.lines.points
        saved = dict(self.offsets)
        for path in sorted(files):
            self._read_file(path, began, budget_s)
            self._write()
            if self.offsets != saved:
                self._save_state()
                saved = dict(self.offsets)
            if self.full:
                self.note(
                    f"TensorBoard scalars past the job's limit of {self.max_points} are not "
                    "recorded (LAUNCHBAY_TENSORBOARD_MAX_POINTS)"
                )
                break
            if budget_s is not None and time.monotonic() - began > budget_s:
                break
        took = time.monotonic() - began
        # Four times the pass's time asleep: a flood of scalars takes at most a fifth of a core.
        self.pause_after = max(2.0, 4 * took)
        return self.lines.points - before

    def _read_file(self, path: Path, began: float, budget_s: float | None) -> None:
        key = self.key(path)
        if key in self.broken:
            return
        offset = self.offsets.get(key, 0)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return
        with open(fd, "rb") as handle:
            while True:
                handle.seek(offset)
                buffer = handle.read(READ_BYTES)
                found = split_records(buffer)
                self._take(found, path)
                offset += found.consumed
                if found.broken:
                    self.broken.add(key)
                    self.note(f"{path.name}: {found.broken}; the rest of it is not read")
                    break
                if found.consumed == 0 or len(buffer) < READ_BYTES or self.full:
                    break
                if budget_s is not None and time.monotonic() - began > budget_s:
                    break
        with self._lock:
            self.offsets[key] = offset

    def _take(self, found: Records, path: Path) -> None:
        if found.skipped:
            self.note(f"{path.name}: {found.skipped} record(s) with a bad checksum skipped")
        for data in found.data:
            try:
                scalars = event_scalars(data)
            except BadRecord:
                continue
            for scalar in scalars:
                if self.full:
                    return
                self.lines.add(_named(scalar, path.parent.name))

    def _write(self) -> None:
        lines = self.lines.take()
        if not lines:
            return
        try:
            fd = os.open(self.events_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            self.note(f"TensorBoard scalars not written to the events file: {exc}")
            return
        try:
            chunk: list[bytes] = []
            size = 0
            for line in lines:  # whole lines per write(): other writers append to it too
                data = (line + "\n").encode("utf-8")
                if size + len(data) > 1 << 20 and chunk:
                    _write_all(fd, b"".join(chunk))
                    chunk, size = [], 0
                chunk.append(data)
                size += len(data)
            _write_all(fd, b"".join(chunk))
        except OSError as exc:
            self.note(f"TensorBoard scalars not written to the events file: {exc}")
        finally:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
