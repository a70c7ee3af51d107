"""Capture for Hugging Face accelerate, attached when the program imports `accelerate.accelerator`.

- What `Accelerator.log(values, step=...)` is given becomes metric lines on the main process,
  whether or not the program set up trackers (unless `LaunchbayTracker` is one of them); the
  files of its TensorBoard tracker are not read again as TensorBoard scalars.
- Each `save_state` directory is registered once every process has written its part (each
  saves its own `random_states_<n>.pkl`); its copy holds ``launchbay-capture.json``: the step
  it was saved at, and how the program counts its steps.
- In a retried attempt, the state Launchbay gives back is loaded (`load_state`) when a prepared
  data loader is first iterated, that is after every `prepare` and before the first batch;
  unless the program loads a state itself. The program's loop runs again from its own start,
  with model, optimizer, scheduler and RNG restored: steps it logs counting from its first
  step again are moved to follow the checkpoint's (its first step comes one interval after the
  checkpoint's), so no two points of the job share a step. Steps it logs otherwise are kept.
- Steps `log` is not given count on from the last one (from the checkpoint's, when resumed);
  a `save_state` the program logged nothing before has the number of optimizer steps taken.
"""

import importlib
import json
import weakref
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from jobs.integrations.attach.common import (
    CaptureHost,
    framework_saving,
    register_checkpoint,
    report,
    resume_path,
)

META = "launchbay-capture.json"
STATE_FILE = "random_states_0.pkl"  # what every save_state directory holds


@dataclass
class Steps:
    """How this process's program counts steps, and where it stands."""

    last: int | None = None  # the last step recorded (moved, after a resume)
    epoch: int | None = None  # the last `epoch` logged (its whole part)
    origin: int | None = None  # the first step the program gave `log`
    interval: int | None = None  # the distance to its second one
    optimizer_steps: int = 0
    shift: int | None = None  # None until the first step after a resume is seen
    resumed: dict[str, Any] | None = None  # the checkpoint's launchbay-capture.json
    program_loaded: bool = False

    def recorded(self, step: int | None) -> int:
        if step is None:
            base = self.last if self.last is not None else (self.resumed or {}).get("step")
            self.last = (base if base is not None else 0) + 1
            return self.last
        step = int(step)
        if self.resumed is not None and self.shift is None:
            self.shift = self._shift(step)
        if self.origin is None:
            self.origin = step
        elif self.interval is None and step != self.origin:
            self.interval = step - self.origin
        self.last = step + (self.shift or 0)
        return self.last

    def _shift(self, first: int) -> int:
        """The move for a resumed program whose first step is `first`: none unless it starts
        over from the first step it logged before (`origin` in the checkpoint)."""
        assert self.resumed is not None
        saved, origin = self.resumed.get("step"), self.resumed.get("origin")
        self.origin, self.interval = origin, self.resumed.get("interval")
        if not isinstance(saved, int) or not isinstance(origin, int) or first != origin:
            return 0
        return saved + int(self.interval or 1) - origin

    def checkpoint_step(self) -> int:
        """The step of the last point logged; before any (of a resumed program that logs its
        steps), the resumed checkpoint's; for a program that logs none, its optimizer steps."""
        if self.last is not None:
            return self.last
        saved = (self.resumed or {}).get("step")
        if isinstance(saved, int) and self.origin is not None:
            return saved
        return self.optimizer_steps

    def metadata(self) -> dict[str, Any]:
        return {
            "step": self.checkpoint_step(),
            "origin": self.origin,
            "interval": self.interval,
            "optimizer_steps": self.optimizer_steps,
        }


steps = Steps()
_armed: list[weakref.ref[Any]] = []
_originals: dict[str, Any] = {}


def accelerate_state_to_resume() -> Path | None:
    path = resume_path()
    return path if path is not None and (path / STATE_FILE).is_file() else None


def _has_explicit_tracker(accelerator: Any) -> bool:
    return any(type(t).__name__ == "LaunchbayTracker" for t in getattr(accelerator, "trackers", []))


def _log(original: Any) -> Any:
    def log(self: Any, values: dict[str, Any], step: int | None = None, *a: Any, **k: Any) -> Any:
        result = original(self, values, step, *a, **k)
        if self.is_main_process and not _has_explicit_tracker(self):
            report(steps.recorded(step), values)
            epoch = values.get("epoch") if isinstance(values, dict) else None
            if isinstance(epoch, int | float) and not isinstance(epoch, bool):
                steps.epoch = int(epoch)
        return result

    return log


def _init_trackers(original: Any, capture: CaptureHost) -> Any:
    def init_trackers(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        for tracker in getattr(self, "trackers", []):
            if type(tracker).__name__ == "TensorBoardTracker" and tracker.logging_dir:
                capture.skip_tensorboard(tracker.logging_dir)
        return result

    return init_trackers


def _save_state(original: Any, capture: CaptureHost) -> Any:
    def save_state(self: Any, output_dir: Any = None, *args: Any, **kwargs: Any) -> Any:
        with framework_saving():
            location = original(self, output_dir, *args, **kwargs)
        self.wait_for_everyone()
        folder = location or output_dir
        if self.is_main_process and folder is not None and Path(folder).is_dir():
            meta = json.dumps(steps.metadata()).encode()
            step = steps.checkpoint_step()
            epoch = steps.epoch
            register_checkpoint(capture, Path(folder), step=step, epoch=epoch, extra={META: meta})
        return location

    return save_state


def _load_state(original: Any) -> Any:
    def load_state(self: Any, *args: Any, **kwargs: Any) -> Any:
        steps.program_loaded = True
        _armed.clear()
        return original(self, *args, **kwargs)

    return load_state


def _prepare(original: Any) -> Any:
    def prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if not steps.program_loaded and steps.resumed is None and not _armed:
            if accelerate_state_to_resume() is not None:
                _armed.append(weakref.ref(self))
        return result

    return prepare


def _resume_armed(capture: CaptureHost) -> None:
    """Load the state to resume from into the armed Accelerator (once, on each process)."""
    accelerator = _armed.pop()() if _armed else None
    folder = accelerate_state_to_resume()
    if accelerator is None or folder is None or steps.program_loaded:
        return
    try:
        _originals["load_state"](accelerator, str(folder))
    except Exception as exc:
        capture.note(f"could not load the state of {folder.name} ({exc}): starting afresh")
        return
    try:
        steps.resumed = json.loads((folder / META).read_text())
    except (OSError, ValueError):
        steps.resumed = {}
    steps.optimizer_steps = int(steps.resumed.get("optimizer_steps") or 0)
    if accelerator.is_main_process:
        capture.note(f"resumed accelerate's state from {folder.name} (load_state)")


def _iterate(original: Any, capture: CaptureHost) -> Any:
    def __iter__(self: Any) -> Any:
        if _armed:
            _resume_armed(capture)
        return original(self)

    return __iter__


def _optimizer_step(original: Any) -> Any:
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if getattr(self.gradient_state, "sync_gradients", True):
            steps.optimizer_steps += 1
        return result

    return step


def attach(framework: str, module: ModuleType, capture: CaptureHost) -> None:
    accelerator = module.Accelerator
    _originals["load_state"] = accelerator.load_state
    capture.wrap(accelerator, "log", _log)
    capture.wrap(accelerator, "init_trackers", lambda original: _init_trackers(original, capture))
    capture.wrap(accelerator, "save_state", lambda original: _save_state(original, capture))
    capture.wrap(accelerator, "load_state", _load_state)
    capture.wrap(accelerator, "prepare", _prepare)
    loaders = importlib.import_module("accelerate.data_loader")
    for name in ("DataLoaderShard", "DataLoaderDispatcher"):
        capture.wrap(getattr(loaders, name), "__iter__", lambda o: _iterate(o, capture))
    optimizer = importlib.import_module("accelerate.optimizer")
    capture.wrap(optimizer.AcceleratedOptimizer, "step", _optimizer_step)
