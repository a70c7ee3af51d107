"""Capture without edits (a job spec's `capture: auto`, the default): what a program records
through its framework or TensorBoard becomes the job's metrics and checkpoints, unmodified.

`worker/rank_main.py` loads this package by its path, under the private name
``_launchbay_capture``, before the program's directory is on `sys.path`: the program cannot
shadow it, and it puts no `jobs` in `sys.modules` that the program did not import. So it uses
the standard library only, and relative imports.

    session = start(root)   # the import hook (`hook`); on rank 0, a thread reading TensorBoard
    ...                     # the program runs
    session.finish()        # the last TensorBoard scalars; what the program undid, said

Two layers run here: the framework integrations (`jobs.integrations.attach`, attached by the
import hook when the program imports transformers, Lightning, accelerate, DeepSpeed or
torch.distributed.checkpoint) and TensorBoard (`tensorboard`). The third, `log_metrics`, is the
worker's (`worker.log_metrics`). Each says what it could not do in the rank's log, with the
prefix ``[launchbay] capture:``; none of them may stop the program.
"""

import os
import shutil
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from .hook import AttachFinder, Capture, note
from .tensorboard import DEFAULT_MAX_POINTS, STATE_FILE, TensorBoardReader

__all__ = ["Capture", "Session", "start"]

# The most one pass of the reading thread takes before it lets the next one go on.
PASS_BUDGET_S = 5.0
# The most the last reading, after the program returned, may add to the rank's life.
FINAL_BUDGET_S = 300.0


class Session:
    """One rank's capture, from `start` to `finish`."""

    def __init__(self, capture: Capture, reader: TensorBoardReader | None) -> None:
        self.capture = capture
        self.reader = reader
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if reader is not None:
            self._thread = threading.Thread(
                target=self._read_every, name="launchbay-capture", daemon=True
            )
            self._thread.start()

    def _read_every(self) -> None:
        assert self.reader is not None
        while not self._stop.is_set():
            try:
                self.reader.pass_once(budget_s=PASS_BUDGET_S)
            except Exception as exc:  # capture must never stop the program
                note(f"TensorBoard reading stopped: {type(exc).__name__}: {exc}")
                return
            self._stop.wait(self.reader.pause_after)

    def finish(self, budget_s: float = FINAL_BUDGET_S) -> None:
        """Read the last scalars and say what the program undid; never raises."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self.reader is not None and self._thread is not None:
                self.reader.pass_once(budget_s=budget_s)
            self.capture.check_wrapped()
        except Exception as exc:
            note(f"could not finish: {type(exc).__name__}: {exc}")


def _directories(environ: Mapping[str, str]) -> list[Path]:
    """Where the program's TensorBoard files go: its working directory and the output dir."""
    found: list[Path] = []
    for directory in (os.getcwd(), environ.get("LAUNCHBAY_OUTPUT_DIR", "")):
        if directory:
            real = Path(directory).resolve()
            if real.is_dir() and real not in found:
                found.append(real)
    return found


def _remove_unfinished_copies(checkpoints: Path) -> None:
    """Copies of checkpoints an earlier attempt's rank 0 was making when it was killed
    (`jobs.integrations.attach.common.copy_into_checkpoints` names them so)."""
    try:
        for entry in os.scandir(checkpoints):
            if entry.name.startswith(".") and ".capture-" in entry.name:
                if entry.name.endswith(".tmp"):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    if os.path.lexists(entry.path):
                        os.unlink(entry.path)
    except OSError:
        pass


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default


def start(root: Path, environ: Mapping[str, str] = os.environ) -> Session:
    """Install the import hook; on rank 0 of a job, start reading TensorBoard files."""
    capture = Capture(root)
    sys.meta_path.insert(0, AttachFinder(capture.attach))
    reader = None
    events = environ.get("LAUNCHBAY_EVENTS_FILE", "")
    if (environ.get("RANK", "0") or "0") == "0" and events:
        checkpoints = environ.get("LAUNCHBAY_CHECKPOINT_DIR", "")
        if checkpoints:
            _remove_unfinished_copies(Path(checkpoints))
        reader = TensorBoardReader(
            _directories(environ),
            Path(events),
            Path(checkpoints) / STATE_FILE if checkpoints else None,
            capture.tensorboard_skipped,
            note,
            _int(environ.get("LAUNCHBAY_TENSORBOARD_MAX_POINTS"), DEFAULT_MAX_POINTS),
        )
    if reader is not None:
        capture.on_skip = reader.remember_skip
    return Session(capture, reader)
