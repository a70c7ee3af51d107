"""The import hook: an integration attaches right after its framework's module has run, the
module keeps its own loader, and whatever goes wrong in attaching stays out of the program."""

import functools
import importlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs.capture import hook
from jobs.capture.hook import AttachFinder, Capture

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def framework(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """A package `fakefw` whose `fakefw.trainer` is watched; what attached is listed."""
    (tmp_path / "fakefw").mkdir()
    (tmp_path / "fakefw" / "__init__.py").write_text("")
    (tmp_path / "fakefw" / "trainer.py").write_text(
        "class Trainer:\n    def train(self):\n        return 'trained'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(hook.WATCHED, "fakefw.trainer", "fake")
    attached: list[Any] = []
    capture = Capture(ROOT)

    def attach(name: str, module: types.ModuleType, host: Capture) -> None:
        attached.append((name, module.Trainer))
        if getattr(module, "BREAK", False):
            raise AttributeError("no such thing")
        host.wrap(module.Trainer, "train", lambda original: lambda self: original(self) + "+")

    integrations = types.SimpleNamespace(attach=attach)
    monkeypatch.setattr(capture, "_integrations", lambda: integrations)
    finder = AttachFinder(capture.attach)
    sys.meta_path.insert(0, finder)
    attached.append(capture)
    try:
        yield attached
    finally:
        sys.meta_path.remove(finder)
        for name in ("fakefw", "fakefw.trainer"):
            sys.modules.pop(name, None)


def test_the_integration_attaches_once_after_the_module_ran(framework: list[Any]) -> None:
    capture = framework.pop(0)
    module = importlib.import_module("fakefw.trainer")
    assert framework == [("fake", module.Trainer)]
    assert module.Trainer().train() == "trained+"
    assert type(module.__loader__).__name__ == "SourceFileLoader"
    assert module.__spec__.loader is module.__loader__
    importlib.reload(module)  # runs the module again: capture does not attach twice
    assert len(framework) == 1
    assert capture.attached == {"fakefw.trainer": "fake"}


def test_a_failing_attach_is_said_and_the_import_goes_on(
    framework: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    framework[0]._integrations = lambda: types.SimpleNamespace(
        attach=lambda *a: (_ for _ in ()).throw(AttributeError("Trainer has no train"))
    )
    module = importlib.import_module("fakefw.trainer")
    assert module.Trainer().train() == "trained"
    said = capsys.readouterr().err
    assert "[launchbay] capture: could not attach to fakefw.trainer (AttributeError" in said


def test_what_the_program_replaces_is_said_what_it_wraps_is_not(
    framework: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    capture = framework.pop(0)
    module = importlib.import_module("fakefw.trainer")
    ours = module.Trainer.train
    capture.check_wrapped()
    assert capsys.readouterr().err == ""
    module.Trainer.train = functools.wraps(ours)(lambda self: ours(self))  # still ours inside
    capture.check_wrapped()
    assert capsys.readouterr().err == ""
    module.Trainer.train = lambda self: "theirs"
    capture.check_wrapped()
    assert "fakefw.trainer.Trainer.train was replaced by the program" in capsys.readouterr().err


def test_a_jobs_package_that_is_not_launchbays_is_not_imported_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    capture = Capture(ROOT)
    mine = types.ModuleType("jobs")
    mine.__file__ = str(tmp_path / "jobs" / "__init__.py")
    monkeypatch.setitem(sys.modules, "jobs", mine)
    with pytest.raises(ImportError, match="is not Launchbay's"):
        capture._integrations()
