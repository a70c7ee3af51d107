"""What every framework's capture does alike: report what the framework logs, and register what
it saves as a checkpoint of the job, once.

A checkpoint a framework saves outside the job's checkpoint directory (a Trainer's
`output_dir`, a `ModelCheckpoint`'s `dirpath`, wherever `save_state` was told) is copied into
it under its own name (``checkpoint-8``, ``epoch=1-step=8.ckpt``; ``checkpoint-8.2`` when that
name is taken), written under a hidden temporary name and renamed into place, then reported:
the program keeps its files as they are (it may rotate them away or save over them), and the
job keeps its copy (retention by the spec's `checkpoint.keep_last`). One saved inside the
checkpoint directory is reported where it is. Either way a file or directory is reported once
per version, whichever integration sees it first (an integration the program added itself
and the one capture attached).
"""

import contextlib
import math
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from jobs.contract.events import checkpoint_line, metric_line
from jobs.contract.system_metrics import is_system_metric
from jobs.integrations.values import report_values, split_epoch
from jobs.runtime import env
from jobs.runtime.distributed import barrier, get_rank
from jobs.runtime.events import clean_metrics, write_event

MAX_CHECKPOINT_METRICS = 100


class CaptureHost(Protocol):
    """What `jobs.capture.hook.Capture` gives an integration."""

    def note(self, message: str) -> None: ...

    def skip_tensorboard(self, directory: object) -> None: ...

    def wrap(self, owner: object, name: str, make: Callable[[Any], Any]) -> None: ...


# The latest value of each metric reported here: a checkpoint line carries them, so the
# spec's `best_metric` can choose among captured checkpoints.
latest: dict[str, float] = {}
_reported: set[tuple[object, ...]] = set()
_last_epoch: tuple[int, object] | None = None
_saving = threading.local()


def report(step: int, values: Mapping[str, Any], total_steps: int | None = None) -> bool:
    """One metric line (rank 0 only), as `report_values` writes it; the metric `epoch` only
    when it changed or the step did (Trainer logs it with the loss and again with the
    evaluation of the same step). `total_steps`: the framework's planned steps, if known."""
    global _last_epoch
    if get_rank() != 0:
        return False
    values = {k: v for k, v in values.items() if not is_system_metric(str(k))}
    epoch = values.get("epoch")
    if epoch is not None and _last_epoch == (step, epoch):
        line_epoch, rest = split_epoch(values)
        rest.pop("epoch", None)
        metrics = clean_metrics(rest)
        line = metric_line(step, line_epoch, metrics, total_steps=total_steps)
        written = bool(metrics) and write_event(line)
    else:
        written = report_values(step, values, total_steps)
    _last_epoch = (step, epoch)
    for name, value in values.items():
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            latest[str(name)] = float(value)
    return written


@contextlib.contextmanager
def framework_saving() -> Iterator[None]:
    """Inside a framework's own save (Trainer's, `save_state`): the DeepSpeed and
    torch.distributed.checkpoint saves it makes are part of that checkpoint, not their own."""
    _saving.depth = getattr(_saving, "depth", 0) + 1
    try:
        yield
    finally:
        _saving.depth -= 1


def in_framework_save() -> bool:
    return getattr(_saving, "depth", 0) > 0


def step_in_name(name: str) -> int | None:
    """The last number in a name (``global_step8`` -> 8), or None."""
    found = re.findall(r"\d+", name)
    return int(found[-1]) if found else None


def inside_checkpoint_dir(path: Path) -> bool:
    return path.resolve().is_relative_to(env.checkpoint_dir().resolve())


def _version(path: Path) -> tuple[object, ...]:
    """What tells one save of `path` from the next one under the same name."""
    real = path.resolve()
    if real.is_dir():
        files = []
        for directory, _, names in os.walk(real):
            for name in names:
                st = os.lstat(os.path.join(directory, name))
                files.append((os.path.join(directory, name), st.st_size, st.st_mtime_ns))
        return (str(real), tuple(sorted(files)))
    st = real.stat()
    return (str(real), st.st_ino, st.st_size, st.st_mtime_ns)


def _copy_file(source: Path, target: Path) -> None:
    with open(source, "rb") as src, open(target, "wb") as dst:
        try:  # in the kernel; a filesystem with reflinks shares the blocks
            while os.copy_file_range(src.fileno(), dst.fileno(), 1 << 30):
                pass
        except OSError:
            src.seek(0)
            dst.seek(0)
            dst.truncate()
            shutil.copyfileobj(src, dst, 1 << 20)


def _free_name(directory: Path, name: str, is_dir: bool) -> Path:
    candidate, number = directory / name, 2
    stem, suffix = (name, "") if is_dir else (Path(name).stem, Path(name).suffix)
    while candidate.exists() or candidate.is_symlink():
        candidate = directory / f"{stem}.{number}{suffix}"
        number += 1
    return candidate


def copy_into_checkpoints(source: Path, extra: Mapping[str, bytes] | None = None) -> Path:
    """A copy of `source` (a file, or a directory's regular files) in the checkpoint
    directory, complete before it appears; `extra` files are added to a directory's copy."""
    directory = env.checkpoint_dir()
    directory.mkdir(parents=True, exist_ok=True)
    is_dir = source.is_dir()
    temp = directory / f".{source.name}.capture-{os.getpid()}.tmp"
    shutil.rmtree(temp, ignore_errors=True)
    try:
        if is_dir:
            for folder, _, names in os.walk(source):
                relative = Path(folder).relative_to(source)
                (temp / relative).mkdir(parents=True, exist_ok=True)
                for name in names:
                    if os.path.isfile(os.path.join(folder, name)):
                        _copy_file(Path(folder) / name, temp / relative / name)
            for name, data in (extra or {}).items():
                (temp / name).write_bytes(data)
        else:
            _copy_file(source, temp)
        target = _free_name(directory, source.name, is_dir)
        os.rename(temp, target)
        return target
    except BaseException:
        if is_dir:
            shutil.rmtree(temp, ignore_errors=True)
        else:
            temp.unlink(missing_ok=True)
        raise


def register_checkpoint(
    capture: CaptureHost | None,
    source: Path,
    *,
    step: int | None,
    epoch: int | None,
    extra: Mapping[str, bytes] | None = None,
) -> str | None:
    """Report `source` (rank 0) as a checkpoint, once per version, copied into the checkpoint
    directory unless it lies there; the path reported, or None. Never raises: a checkpoint
    that cannot be kept is said in the log, and training goes on."""
    if get_rank() != 0:
        return None
    try:
        version = _version(source)
        if version in _reported:
            return None
        if inside_checkpoint_dir(source) and not extra:
            kept = source.resolve()
        else:
            kept = copy_into_checkpoints(source, extra)
        _reported.add(version)
        relative = kept.relative_to(env.checkpoint_dir().resolve()).as_posix()
    except (OSError, ValueError) as exc:
        if capture is not None:
            capture.note(f"checkpoint {source} not kept: {exc}")
        return None
    metrics = dict(list(latest.items())[-MAX_CHECKPOINT_METRICS:])
    write_event(checkpoint_line(relative, step, epoch, metrics))
    return relative


def every_rank_saved() -> None:
    """Wait until every rank has written its part of a checkpoint (RNG states, shards)."""
    barrier()


def resume_path() -> Path | None:
    """The checkpoint a retried attempt resumes from (LAUNCHBAY_RESUME_FROM), if it is here."""
    path = env.resume_from()
    if path is None:
        return None
    if not path.is_absolute():
        path = env.checkpoint_dir() / path
    return path if path.exists() else None


_cpu_index_allowed = False


def allow_cpu_index_locations() -> None:
    """Let `torch.load(..., map_location=torch.device("cpu", 0))` load CPU tensors.

    accelerate gives each CPU rank of a multi-process job the device ``cpu:0``
    (`PartialState.set_device`: ``torch.device("cpu", local_rank % torch.cpu.device_count())``);
    Trainer resuming with several ranks loads `optimizer.pt` with ``map_location=args.device``;
    torch turns a device into its string, ``"cpu:0"``, and its CPU deserializer takes only
    ``"cpu"``: "don't know how to restore data location ... (tagged with cpu:0)". This
    deserializer, asked after torch's own, takes ``cpu:<n>`` for a storage already on the CPU.
    """
    global _cpu_index_allowed
    if _cpu_index_allowed:
        return
    import torch.serialization

    torch.serialization.register_package(30, _no_tag, _cpu_index)
    _cpu_index_allowed = True


def _no_tag(storage: Any) -> None:
    return None


def _cpu_index(storage: Any, location: str) -> Any:
    if re.fullmatch(r"cpu:\d+", location) and storage.device.type == "cpu":
        return storage
    return None
