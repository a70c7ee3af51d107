"""save_checkpoint is atomic and loads into a plain model; resuming restores everything."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from jobs.runtime import (
    DistContext,
    checkpoint,
    env,
    load_resume_state,
    prepare_model,
    restore,
    resume_position,
    save_checkpoint,
    setup_distributed,
    teardown_distributed,
)
from tests.support.ranks import free_port


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    ckpt_dir, events_file = tmp_path / "ckpt", tmp_path / "events.jsonl"
    monkeypatch.setenv(env.CHECKPOINT_DIR, str(ckpt_dir))
    monkeypatch.setenv(env.EVENTS_FILE, str(events_file))
    return ckpt_dir, events_file


@pytest.fixture
def torchrun_world_of_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[DistContext]:
    """What torchrun --nproc_per_node 1 gives a script: a real (gloo) group of one rank."""
    for name, value in {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "TORCHELASTIC_RUN_ID": "unit-test",
        env.DEVICE: "cpu",
    }.items():
        monkeypatch.setenv(name, value)
    ctx = setup_distributed()
    assert dist.is_initialized()
    yield ctx
    teardown_distributed()


def train_a_little(model: nn.Module) -> tuple[torch.optim.Optimizer, Any]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).sum().backward()
        optimizer.step()
        scheduler.step()
    return optimizer, scheduler


def test_a_ddp_model_is_saved_unwrapped_and_loads_strictly_into_a_plain_one(
    dirs: tuple[Path, Path], torchrun_world_of_one: DistContext
) -> None:
    ckpt_dir, events_file = dirs
    assert prepare_model(Net(), torchrun_world_of_one).__class__ is Net, "no DDP for one rank"
    model = nn.parallel.DistributedDataParallel(Net())
    optimizer, scheduler = train_a_little(model)
    path = save_checkpoint(
        model, optimizer, scheduler, step=120, epoch=1, metrics={"loss": 0.31},
        sampler_position=7, extra={"note": "x"},
    )  # fmt: skip
    assert path == ckpt_dir / "step-000000120.pt"
    state = torch.load(path, map_location="cpu", weights_only=True)
    assert not any(key.startswith("module.") for key in state["model"])
    plain = Net()
    plain.load_state_dict(state["model"], strict=True)
    for name, value in model.module.state_dict().items():
        assert torch.equal(plain.state_dict()[name], value)
    assert (state["step"], state["epoch"], state["sampler_position"]) == (120, 1, 7)
    assert state["extra"] == {"note": "x"} and state["world_size"] == 1
    mark, line = [json.loads(raw) for raw in events_file.read_text().splitlines()]
    assert mark["type"] == "checkpoint_save" and mark["start"] <= mark["end"] <= line["ts"]
    assert line == {
        "type": "checkpoint",
        "path": "step-000000120.pt",
        "step": 120,
        "epoch": 1,
        "metrics": {"loss": 0.31},
        "ts": line["ts"],
    }


def test_the_line_is_written_only_once_the_file_is_complete(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt_dir, _ = dirs
    seen: list[list[str]] = []
    real_write_event = checkpoint.write_event

    def checking_write_event(event: Any) -> bool:
        final = ckpt_dir / event["path"]
        torch.load(final, weights_only=True)  # complete and readable already
        seen.append(sorted(p.name for p in ckpt_dir.iterdir()))
        return real_write_event(event)

    monkeypatch.setattr(checkpoint, "write_event", checking_write_event)
    save_checkpoint(Net(), step=5, epoch=0)
    assert seen == [["step-000000005.pt"]], "no temporary file is left next to it"


def test_a_failed_save_leaves_no_file_and_no_line(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt_dir, events_file = dirs

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(Net(), step=9, epoch=0)
    monkeypatch.undo()
    assert list(ckpt_dir.iterdir()) == []
    assert not events_file.exists()


def test_other_ranks_neither_write_nor_wait(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt_dir, events_file = dirs
    monkeypatch.setenv("RANK", "1")
    assert save_checkpoint(Net(), step=1, epoch=0) is None
    assert not ckpt_dir.exists() and not events_file.exists()


def test_resume_restores_model_optimizer_scheduler_and_position(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = Net()
    optimizer, scheduler = train_a_little(model)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    path = save_checkpoint(model, optimizer, scheduler, scaler, step=30, epoch=2,
                           sampler_position=10)  # fmt: skip
    assert load_resume_state() is None, "no LAUNCHBAY_RESUME_FROM: a fresh start"
    monkeypatch.setenv(env.RESUME_FROM, str(path))
    state = load_resume_state()
    assert state is not None
    fresh = Net()
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=0.01)
    fresh_scheduler = torch.optim.lr_scheduler.StepLR(fresh_optimizer, step_size=1, gamma=0.5)
    restore(state, fresh, fresh_optimizer, fresh_scheduler, torch.amp.GradScaler("cpu"))
    for name, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value)
    assert fresh_scheduler.last_epoch == scheduler.last_epoch == 3
    assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    moments = [s["exp_avg"] for s in fresh_optimizer.state.values()]
    assert moments and all(m.abs().sum() > 0 for m in moments)
    assert resume_position(state, batches_per_epoch=10) == (3, 0), "saved at the epoch's end"
    assert resume_position({**state, "sampler_position": 4}, batches_per_epoch=10) == (2, 4)


def test_a_prefixed_state_dict_from_other_code_is_accepted(tmp_path: Path) -> None:
    model = Net()
    prefixed = {f"module.{k}": v for k, v in model.state_dict().items()}
    fresh = Net()
    restore({"model": prefixed}, fresh)
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in model.state_dict().items())


def test_a_missing_resume_file_is_an_error_not_a_fresh_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(env.RESUME_FROM, str(tmp_path / "gone.pt"))
    with pytest.raises(FileNotFoundError, match="gone.pt"):
        load_resume_state()


def test_checkpoint_files_sort_by_step() -> None:
    names = [checkpoint.checkpoint_name(s) for s in (1000, 20, 3)]
    assert sorted(names) == [checkpoint.checkpoint_name(s) for s in (3, 20, 1000)]
    assert os.path.basename(names[0]) == "step-000001000.pt"


class OnGpu(torch.Tensor):
    """A CPU tensor that says it is on cuda:0, as a trained model's tensors would be; `.to()`
    gives the plain CPU tensor that a copy off the GPU would."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 0)

    def to(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        assert args == ("cpu",) and not kwargs, (args, kwargs)
        return self.as_subclass(torch.Tensor).clone()


def tensors_in(state: Any) -> Iterator[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for value in state.values():
            yield from tensors_in(value)
    elif isinstance(state, list | tuple):
        for value in state:
            yield from tensors_in(value)


def test_a_checkpoint_of_gpu_tensors_holds_cpu_tensors_and_leaves_training_alone(
    dirs: tuple[Path, Path],
) -> None:
    model = Net()
    optimizer, scheduler = train_a_little(model)
    model.register_buffer("running", torch.arange(3.0).as_subclass(OnGpu))
    for param_state in optimizer.state.values():
        param_state["exp_avg"] = param_state["exp_avg"].as_subclass(OnGpu)
    on_gpu_before = [s["exp_avg"] for s in optimizer.state.values()]

    path = save_checkpoint(
        model,
        optimizer,
        scheduler,
        step=3,
        epoch=1,
        extra={"ema": torch.ones(2).as_subclass(OnGpu)},
    )

    assert path is not None
    # A CPU-only machine loads it without map_location (and with weights_only).
    state = torch.load(path, weights_only=True)
    tensors = list(tensors_in(state))
    assert len(tensors) > len(model.state_dict())
    assert {(type(t), t.device.type) for t in tensors} == {(torch.Tensor, "cpu")}
    assert torch.equal(state["model"]["running"], torch.arange(3.0))
    assert hasattr(state["model"], "_metadata"), "the state_dict's versions are kept"
    # Training goes on with its own tensors, where they were.
    assert type(model.running) is OnGpu
    after = [s["exp_avg"] for s in optimizer.state.values()]
    assert all(a is b for a, b in zip(after, on_gpu_before, strict=True))


# Storages (by address) that torch.save tags as on cuda:0, as it tags a GPU tensor's: a file
# holding one fails torch.load on a machine without CUDA unless given map_location.
_ON_GPU: set[int] = set()


def _tag_as_gpu(storage: Any) -> str | None:
    return "cuda:0" if _ON_GPU and storage.data_ptr() in _ON_GPU else None


torch.serialization.register_package(1, _tag_as_gpu, lambda obj, location: None)


def test_a_checkpoint_of_gpu_tensors_loads_on_a_machine_without_cuda(
    dirs: tuple[Path, Path],
) -> None:
    """What a CPU-only machine does with a downloaded checkpoint: torch.load without
    map_location. Every storage the file holds must be saved as on the CPU, none with the
    `cuda:0` location that torch.save gives a GPU tensor's."""
    model = Net()
    optimizer, scheduler = train_a_little(model)
    model.register_buffer("running", torch.arange(3.0).as_subclass(OnGpu))
    for param_state in optimizer.state.values():
        param_state["exp_avg"] = param_state["exp_avg"].as_subclass(OnGpu)
    on_gpu = [model.running, *(s["exp_avg"] for s in optimizer.state.values())]
    _ON_GPU.update(t.untyped_storage().data_ptr() for t in on_gpu)
    try:
        # The tagging works: saved as they are, these tensors need CUDA to load.
        probe = dirs[0].parent / "probe.pt"
        torch.save([t.as_subclass(torch.Tensor) for t in on_gpu], probe)
        if not torch.cuda.is_available():
            with pytest.raises(RuntimeError, match="on a CUDA device"):
                torch.load(probe, weights_only=True)
        path = save_checkpoint(model, optimizer, scheduler, step=3, epoch=1)
    finally:
        _ON_GPU.clear()
    assert path is not None
    locations: list[str] = []

    def where(storage: Any, location: str) -> Any:
        locations.append(location)
        return storage

    torch.load(path, weights_only=False, map_location=where)  # our own file: any object
    assert locations and set(locations) == {"cpu"}, locations
    state = torch.load(path, weights_only=True)
    plain = Net()
    plain.register_buffer("running", torch.zeros(3))
    plain.load_state_dict(state["model"])
    assert torch.equal(plain.running, torch.arange(3.0))
