"""The ranks a `python`-launcher program starts itself (``mp.spawn``, ``multiprocessing``): each
child's output goes to its own ``DIR/rank-<n>.log``, and the process group it joins is noted
(`rank_group`), as `rank_main.py` does for a rank that torchrun starts.

In the program's own process (`adopt_children`, called by `rank_main.py`), every process it
starts gets, in place of its target, ``runpy.run_path(<this file>, {...})`` with the target
kept inside, so a ``spawn`` child (a fresh interpreter, which unpickles the target) runs this
file first as well as a ``fork`` child does. The child's rank is, for torch's
``start_processes``/``mp.spawn``, the process index it passes to the function; otherwise the
rank of the process group it joins, from then on (lines before that stay in rank 0's log).

Standard library only, run by path, like `rank_main.py`.
"""

import functools
import importlib.util
import os
import runpy
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

RUN_NAME = "__launchbay_child__"
# torch.multiprocessing's wrapper of a spawned function: `_wrap(fn, index, args, error_file)`.
TORCH_WRAP = ("torch.multiprocessing.spawn", "_wrap")


def load_sibling(name: str) -> ModuleType:
    """A module of this directory, loaded by path once per process under a private name."""
    private = f"_launchbay_{name}"
    if private in sys.modules:
        return sys.modules[private]
    spec = importlib.util.spec_from_file_location(private, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[private] = module
    spec.loader.exec_module(module)
    return module


def spawn_index(target: Any, args: tuple[Any, ...]) -> int | None:
    """The process index torch's `start_processes` gives this child, else None."""
    where = (getattr(target, "__module__", None), getattr(target, "__name__", None))
    if where == TORCH_WRAP and len(args) > 1 and isinstance(args[1], int):
        return args[1]
    return None


def adopt_children(log_dir: Path) -> None:
    """Have every process this one starts run as a rank of its own (see the docstring)."""
    from multiprocessing.process import BaseProcess

    original = BaseProcess.start
    parent = os.getpid()

    def start(self: Any) -> None:
        target = getattr(self, "_target", None)
        if os.getpid() == parent and target is not None:
            state = {
                "_launchbay_target": target,
                "_launchbay_args": tuple(self._args),
                "_launchbay_kwargs": dict(self._kwargs),
                "_launchbay_log_dir": str(log_dir),
                "_launchbay_rank": spawn_index(target, tuple(self._args)),
            }
            self._target = functools.partial(runpy.run_path, __file__, state, RUN_NAME)
            self._args, self._kwargs = (), {}
        original(self)

    BaseProcess.start = start  # type: ignore[method-assign]


def run_child(state: dict[str, Any]) -> Any:
    """In the child: its own log (when its rank is known, else once its group says), the
    group it forms noted, then the target."""
    log_dir = Path(state["_launchbay_log_dir"])
    rank: int | None = state["_launchbay_rank"]
    rank_main = load_sibling("rank_main")
    redirect, log_name = rank_main.redirect_output, rank_main.RANK_LOG
    group = load_sibling("rank_group")
    if rank is not None:
        redirect(log_dir / log_name.format(rank))
        group.watch(log_dir, rank)
    else:
        group.watch(log_dir, None, lambda found: redirect(log_dir / log_name.format(found)))
    target = state["_launchbay_target"]
    result = target(*state["_launchbay_args"], **state["_launchbay_kwargs"])
    group.note_end()
    return result


if __name__ == RUN_NAME:
    run_child(globals())
