"""Noting, from inside a rank, the process group it joined and whether it communicated over it,
for programs that never import Launchbay.

`torch.distributed`'s `init_process_group` and `destroy_process_group` are wrapped as their
module is imported; ``DIR/rank-<R>.group`` is written when a group is formed, before it is
destroyed, and when the program ends (`note_end`):

    {"pid", "rank", "world_size", "backend", "restart", "collectives"}

(`rank` and `world_size` as the default group says; `collectives`: how many collectives ran on
the process's groups, their sequence numbers, of every group it formed). Every framework forms
its group through that function (Trainer and accelerate, Lightning, DeepSpeed,
`init_device_mesh`, a script's own), and what it trains runs collectives on it or on groups
made from it (DDP's broadcast and gradient all-reduce), so whichever ran, the record says
whether the ranks trained as one group: accelerate on CPU without `ACCELERATE_USE_CPU` forms a
group of 2 and then trains a copy per rank, with no collective. `worker.outcome_warnings`
reads the records at the end of the attempt.

Loaded by path (not imported as `worker.rank_group`) by `rank_main.py` and `rank_child.py`, so
it imports only the standard library, like them, and never fails the program: whatever goes
wrong here is swallowed.
"""

import functools
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

MODULE = "torch.distributed.distributed_c10d"
# A copy of `jobs.contract.rank_files.GROUP`'s name (this file imports nothing of Launchbay); a
# unit test holds them equal (tests/unit/worker/test_standalone_copies.py).
RECORD = "rank-{}.group"
# Set on our wrappers, so a module seen twice is wrapped once.
MARK = "__launchbay_group_watch__"


class _Watch:
    """Where records go, and what the groups destroyed so far ran (one per process; a forked
    child's `watch` replaces what it inherited)."""

    log_dir: Path | None = None
    file_rank: int | str | None = None  # None: the group's rank
    redirect: Any = None  # called with the group's rank once known, for a child of unknown rank
    done = 0  # collectives of the groups already destroyed


_watch = _Watch()


def record_path(log_dir: Path, rank: int | str) -> Path:
    return log_dir / RECORD.format(rank)


def _collectives(c10d: ModuleType, group: Any = None) -> int:
    """Collectives run so far on `group`, or on every group of the process (the sum of their
    sequence numbers: a program may train on a group of its own, DeepSpeed's data-parallel
    one); the default group's alone where torch keeps no map of them; 0 when unknown."""
    try:
        groups = [group] if group is not None else list(c10d._world.pg_map)
        return sum(int(g._get_sequence_number_for_group()) for g in groups)
    except Exception:
        try:
            return int(c10d._get_default_group()._get_sequence_number_for_group())
        except Exception:
            return 0


def write_record(c10d: ModuleType) -> None:
    """Write the record of the group `c10d` (torch's distributed_c10d) holds now."""
    if _watch.log_dir is None or not c10d.is_initialized():
        return
    rank = int(c10d.get_rank())
    if _watch.redirect is not None:
        _watch.redirect(rank)
        _watch.redirect = None
    record = {
        "pid": os.getpid(),
        "rank": rank,
        "world_size": int(c10d.get_world_size()),
        "backend": str(c10d.get_backend()),
        "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0),
        "collectives": _watch.done + _collectives(c10d),
    }
    target = record_path(_watch.log_dir, rank if _watch.file_rank is None else _watch.file_rank)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(record))
    os.replace(temp, target)


def _replace(c10d: ModuleType, name: str, wrapper: Any) -> None:
    """Put `wrapper` in place of `c10d.<name>` wherever that is already bound (a module that
    imported it by name before us)."""
    original = c10d.__dict__[name]
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get(name) is original:
            namespace[name] = wrapper
    c10d.__dict__[name] = wrapper


def wrap(c10d: ModuleType) -> None:
    """Record the group after `init_process_group` returns and before `destroy_process_group`
    destroys the default group."""
    init = c10d.__dict__.get("init_process_group")
    destroy = c10d.__dict__.get("destroy_process_group")
    if init is None or destroy is None or getattr(init, MARK, False):
        return

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = init(*args, **kwargs)
        try:
            write_record(c10d)
        except Exception:  # a note about the program must never break it
            pass
        return result

    @functools.wraps(destroy)
    def destroy_process_group(group: Any = None) -> Any:
        try:
            if group is None and c10d.is_initialized():
                write_record(c10d)
            if c10d.is_initialized():
                _watch.done += _collectives(c10d, group)
        except Exception:
            pass
        return destroy(group)

    for wrapper in (init_process_group, destroy_process_group):
        setattr(wrapper, MARK, True)
    _replace(c10d, "init_process_group", init_process_group)
    _replace(c10d, "destroy_process_group", destroy_process_group)


class _WatchImport:
    """A meta path finder that wraps `MODULE`'s loader so that `wrap` runs right after the
    module's own code, before anything else (`torch.distributed` itself, `device_mesh`) takes
    the functions from it."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != MODULE:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_wrap(module: ModuleType) -> None:
            exec_module(module)
            try:
                wrap(module)
            except Exception:
                pass

        try:  # this loader instance only: the module keeps its own loader class
            loader.exec_module = exec_then_wrap
        except (AttributeError, TypeError):
            pass
        return spec


def watch(log_dir: Path, file_rank: int | str | None = None, redirect: Any = None) -> None:
    """Record the groups this process forms in `log_dir`, as `file_rank` (None: as the group's
    rank, after calling `redirect(rank)` when given): wrapped now when torch.distributed is
    already imported, else as soon as it is."""
    _watch.log_dir, _watch.file_rank, _watch.redirect = log_dir, file_rank, redirect
    _watch.done = 0
    try:
        loaded = sys.modules.get(MODULE)
        if loaded is not None:
            wrap(loaded)
        elif not any(isinstance(f, _WatchImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _WatchImport())
    except Exception:
        pass


def note_end() -> None:
    """The program has ended: record the group it left open, if any."""
    try:
        loaded = sys.modules.get(MODULE)
        if loaded is not None:
            write_record(loaded)
    except Exception:
        pass
