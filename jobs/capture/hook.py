"""The import hook: when the program imports a framework's module that Launchbay knows, the
integration for it attaches itself, right after the module has run (the way OpenTelemetry's
instrumentors and MLflow's `autolog` patch a framework from the outside).

`AttachFinder` sits first on `sys.meta_path` and only watches the names in `WATCHED`: it asks
the other finders for the module's spec and hands it back with a loader that runs the module,
restores the module's own loader, and then calls `Capture.attach`. The integrations are
Launchbay's `jobs.integrations.attach`, imported only then, and only when the `jobs` that
Python would import is Launchbay's: a program with a `jobs` package of its own keeps it, and
capture says it could not attach.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

# The module whose loading means the framework is in use -> the integration's name.
WATCHED = {
    "transformers.trainer": "transformers",
    "lightning.pytorch.trainer.trainer": "lightning",
    "pytorch_lightning.trainer.trainer": "lightning",
    "accelerate.accelerator": "accelerate",
    "deepspeed.runtime.engine": "deepspeed",
    "torch.distributed.checkpoint": "dcp",
}
INTEGRATIONS = "jobs.integrations.attach"
NOTE_PREFIX = "[launchbay] capture:"


class _AttachingLoader(importlib.abc.Loader):
    """Runs the module with its own loader, then hands it to `on_loaded`."""

    def __init__(self, loader: Any, on_loaded: Callable[[ModuleType], None]) -> None:
        self.loader = loader
        self.on_loaded = on_loaded

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        # The module sees its own loader (importlib.resources and friends ask it).
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.on_loaded(module)


class AttachFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: gives the watched modules' specs an `_AttachingLoader`."""

    def __init__(self, on_loaded: Callable[[str, ModuleType], None]) -> None:
        self.on_loaded = on_loaded
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        framework = WATCHED.get(fullname)
        busy: set[str] = self._busy.__dict__.setdefault("names", set())
        if framework is None or fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        except (ImportError, ValueError):
            return None
        finally:
            busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _AttachingLoader(spec.loader, lambda m: self.on_loaded(framework, m))
        return spec


def note(message: str) -> None:
    """A line in this rank's log, where the job's user reads what capture did or could not."""
    try:
        sys.stderr.write(f"{NOTE_PREFIX} {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _inside(path: str | None, root: Path) -> bool:
    return path is not None and Path(path).resolve().is_relative_to(root)


class Capture:
    """One rank's capture: what attached, what it wrapped, which TensorBoard directories the
    frameworks already report from. Given to each integration's `attach`."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()  # Launchbay's source: the directory holding `jobs/`
        self.attached: dict[str, str] = {}  # module name -> the framework
        self._wrapped: list[tuple[object, str, object, str]] = []
        self._tensorboard_skip: set[str] = set()
        self._lock = threading.Lock()
        # Told of each directory skipped (rank 0's TensorBoard reader keeps them for retries).
        self.on_skip: Callable[[str], None] | None = None

    # -- what the integrations call ---------------------------------------------------------

    def note(self, message: str) -> None:
        note(message)

    def skip_tensorboard(self, directory: object) -> None:
        """Event files under `directory` are a framework's own copy of what it reports."""
        real = str(Path(str(directory)).resolve())
        with self._lock:
            if real in self._tensorboard_skip:
                return
            self._tensorboard_skip.add(real)
        if self.on_skip is not None:
            self.on_skip(real)

    def tensorboard_skipped(self, directory: Path) -> bool:
        with self._lock:
            return str(directory) in self._tensorboard_skip

    def wrap(self, owner: object, name: str, make: Callable[[Any], Any]) -> None:
        """Replace `owner.name` with `make(original)`, keeping the original's name and doc;
        remembered, so that `check_wrapped` can say when the program replaced it in turn."""
        original = getattr(owner, name)
        wrapper = make(original)
        for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(wrapper, attribute, getattr(original, attribute))
            except (AttributeError, TypeError):
                pass
        wrapper.__wrapped__ = original
        setattr(owner, name, wrapper)
        if isinstance(owner, ModuleType):
            label = owner.__name__
        else:
            label = f"{getattr(owner, '__module__', '?')}.{getattr(owner, '__qualname__', owner)}"
        self._wrapped.append((owner, name, wrapper, f"{label}.{name}"))

    # -- the hook ---------------------------------------------------------------------------

    def attach(self, framework: str, module: ModuleType) -> None:
        """Called once `module` has run; never raises (the program goes on without capture)."""
        if module.__name__ in self.attached:
            return
        self.attached[module.__name__] = framework
        try:
            integrations = self._integrations()
            integrations.attach(framework, module, self)
        except Exception as exc:  # a broken or foreign module must not stop the program
            self.note(
                f"could not attach to {module.__name__} ({type(exc).__name__}: {exc}); "
                "the program runs without it"
            )

    def _integrations(self) -> ModuleType:
        loaded = sys.modules.get("jobs")
        if loaded is not None:
            origin = getattr(loaded, "__file__", None)
        else:
            spec = importlib.util.find_spec("jobs")
            origin = None if spec is None else spec.origin
        if not _inside(origin, self.root):
            raise ImportError(f"the program's own `jobs` ({origin}) is not Launchbay's")
        return importlib.import_module(INTEGRATIONS)

    def check_wrapped(self) -> None:
        """Say which wrapped attributes the program has replaced since (their capture is off)."""
        for owner, name, wrapper, label in self._wrapped:
            current, depth = getattr(owner, name, None), 0
            while current is not wrapper and current is not None and depth < 10:
                current, depth = getattr(current, "__wrapped__", None), depth + 1
            if current is not wrapper:
                self.note(
                    f"{label} was replaced by the program after capture attached to it: "
                    "what capture records through it is missing"
                )
