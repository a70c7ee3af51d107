"""The SDK on two real ranks (spawned processes joined in a gloo group)."""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import torch
import torch.distributed as dist
from torch import nn

from jobs import runtime as lb
from jobs.runtime import DistContext, DistributedSetupError, env
from tests.support.ranks import RankFailed, free_port, run_ranks

# Module-level rank functions: each rank imports this module to find them.


def rank_basics(ctx: DistContext) -> dict[str, Any]:
    mean = lb.reduce_mean(torch.tensor(float(ctx.rank + 1)))
    return {
        "rank": ctx.rank,
        "world": ctx.world_size,
        "backend": ctx.backend,
        "device": str(ctx.device),
        "main": ctx.is_main,
        "group": dist.is_initialized(),
        "mean": mean.item(),
    }


def rank_gather(ctx: DistContext, num_samples: int, shuffle: bool) -> list[torch.Tensor]:
    loader = lb.make_loader(list(range(num_samples)), 2, shuffle=shuffle, seed=1, ctx=ctx)
    seen = torch.cat([batch for batch in lb.start_epoch(loader, 3)])
    pairs = torch.stack([seen, seen * 10], dim=1)  # 2-D outputs gather the same way
    return [
        lb.gather_eval(seen, num_samples),
        lb.gather_eval(pairs, num_samples),
        lb.gather_eval(seen % 2 == 0, num_samples),
    ]


def rank_report_and_save(ctx: DistContext) -> str | None:
    for step in (1, 2, 3):
        lb.report(step, 1, loss=float(ctx.rank))
    path = lb.save_checkpoint(nn.Linear(2, 2), step=3, epoch=1)
    lb.barrier()
    return None if path is None else path.name


def make_problem() -> tuple[nn.Sequential, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return (
        nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1)),
        torch.randn(3, 16, 5),
        torch.randn(3, 16, 1),
    )


def rank_accumulate(ctx: DistContext) -> dict[str, Any]:
    """3 optimizer steps, each over this rank's half of 16 samples as 2 micro-batches of 4."""
    base, xs, ys = make_problem()
    model = lb.prepare_model(base, ctx)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    unsynced: list[torch.Tensor] = []
    accum = 2
    for x, y in zip(xs, ys, strict=True):
        mine_x, mine_y = x[ctx.rank :: ctx.world_size], y[ctx.rank :: ctx.world_size]
        optimizer.zero_grad()
        for micro in range(accum):
            xb, yb = mine_x.chunk(accum)[micro], mine_y.chunk(accum)[micro]
            with lb.accumulation_context(model, micro, accum):
                (nn.functional.mse_loss(model(xb), yb) / accum).backward()
            if micro == 0:
                grad = cast(nn.Linear, base[0]).weight.grad  # `base` is the module inside DDP
                assert grad is not None
                unsynced.append(grad.clone())
        optimizer.step()
    return {"params": lb.unwrap_model(model).state_dict(), "unsynced": unsynced}


# One start of two ranks runs every rank function above in turn (each start costs the ranks an
# import of torch, seconds of CPU); the tests below each read what their function returned.


@dataclass(frozen=True)
class PartFailed:
    """A rank function that raised: its traceback, kept as its result so that only its test
    fails."""

    traceback: str


PARTS: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    "basics": (rank_basics, ()),
    "gather in order": (rank_gather, (7, False)),
    "gather shuffled": (rank_gather, (7, True)),
    "report and save": (rank_report_and_save, ()),
    "accumulate": (rank_accumulate, ()),
}


def rank_every_part(ctx: DistContext) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, (fn, args) in PARTS.items():
        try:
            results[name] = fn(ctx, *args)
        except Exception:  # noqa: BLE001 - the part's test fails with it
            results[name] = PartFailed(traceback.format_exc())
    return results


@dataclass
class TwoRanks:
    by_rank: list[dict[str, Any]]
    events_file: Path
    ckpt_dir: Path

    def results(self, part: str) -> list[Any]:
        """What `part`'s function returned on rank 0 and rank 1; fails naming the part and
        the rank when it raised."""
        for rank, results in enumerate(self.by_rank):
            if isinstance(results[part], PartFailed):
                pytest.fail(f"{part} raised on rank {rank}:\n{results[part].traceback}")
        return [results[part] for results in self.by_rank]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> TwoRanks:
    folder = tmp_path_factory.mktemp("two-ranks")
    events_file, ckpt_dir = folder / "events.jsonl", folder / "ckpt"
    by_rank = run_ranks(
        rank_every_part,
        2,
        env={env.EVENTS_FILE: str(events_file), env.CHECKPOINT_DIR: str(ckpt_dir)},
    )
    return TwoRanks(by_rank, events_file, ckpt_dir)


def test_two_ranks_join_one_gloo_group(two_ranks: TwoRanks) -> None:
    results = two_ranks.results("basics")
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world"] == 2 and r["backend"] == "gloo" and r["group"] for r in results)
    assert [r["main"] for r in results] == [True, False]
    assert all(r["device"] == "cpu" and r["mean"] == 1.5 for r in results)


@pytest.mark.parametrize("shuffle", [False, True])
def test_gather_eval_counts_each_of_an_odd_number_of_samples_once(
    two_ranks: TwoRanks, shuffle: bool
) -> None:
    for flat, pairs, even in two_ranks.results("gather shuffled" if shuffle else "gather in order"):
        assert len(flat) == 7
        assert sorted(flat.tolist()) == list(range(7))
        if not shuffle:
            assert flat.tolist() == list(range(7)), "dataset order is rebuilt"
        assert torch.equal(pairs[:, 0], flat) and torch.equal(pairs[:, 1], flat * 10)
        assert even.dtype == torch.bool and int(even.sum()) == 4


def test_only_rank_zero_reports_and_saves(two_ranks: TwoRanks) -> None:
    names = two_ranks.results("report and save")
    assert names == ["step-000000003.pt", None]
    lines = [json.loads(raw) for raw in two_ranks.events_file.read_text().splitlines()]
    assert [(e["type"], e["step"]) for e in lines] == [
        ("metric", 1),
        ("metric", 2),
        ("metric", 3),
        ("checkpoint_save", 3),  # its goodput mark, then the checkpoint
        ("checkpoint", 3),
    ]
    reported = [e for e in lines if e["type"] != "checkpoint_save"]
    assert all(e["metrics"].get("loss", 0.0) == 0.0 for e in reported), "rank 0's values"
    assert [p.name for p in two_ranks.ckpt_dir.iterdir()] == ["step-000000003.pt"]


def test_no_sync_accumulation_matches_the_large_batch(two_ranks: TwoRanks) -> None:
    results = two_ranks.results("accumulate")
    reference, xs, ys = make_problem()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in zip(xs, ys, strict=True):
        optimizer.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        optimizer.step()
    for result in results:
        for name, value in reference.state_dict().items():
            torch.testing.assert_close(result["params"][name], value, rtol=1e-5, atol=1e-6)
    # Inside no_sync the ranks keep their own gradients: nothing was all-reduced yet.
    first, second = (r["unsynced"][0] for r in results)
    assert not torch.allclose(first, second)


def test_a_plain_process_is_a_world_of_one_without_a_group() -> None:
    with lb.distributed() as ctx:
        assert (ctx.rank, ctx.world_size, ctx.is_main) == (0, 1, True)
        assert ctx.device.type == "cpu" or torch.cuda.is_available()
        assert not dist.is_initialized()
        assert lb.reduce_mean(torch.tensor(3.0)).item() == 3.0
        assert lb.gather_eval(torch.arange(5), 3).tolist() == [0, 1, 2]


def test_the_group_is_torn_down_also_on_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "TORCHELASTIC_RUN_ID": "unit-test",
        env.DEVICE: "cpu",
    }.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(KeyError), lb.distributed():
        assert dist.is_initialized()
        raise KeyError("boom")
    assert not dist.is_initialized()


def test_impossible_device_or_backend_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setenv(env.DEVICE, "cuda")
    with pytest.raises(DistributedSetupError, match="CUDA is not available"):
        lb.setup_distributed()
    monkeypatch.setenv(env.DEVICE, "cpu")
    monkeypatch.setenv(env.BACKEND, "nccl")
    with pytest.raises(DistributedSetupError, match="nccl"):
        lb.setup_distributed()


def rank_fails_on_one(ctx: DistContext) -> None:
    if ctx.rank == 1:
        raise ValueError("rank one gives up")
    lb.barrier()  # rank 0 would wait here forever without the harness


def test_a_failing_rank_fails_the_run_and_its_peers_are_stopped() -> None:
    with pytest.raises(RankFailed, match="rank 1 exited") as failure:
        run_ranks(rank_fails_on_one, 2, timeout_s=60)
    assert "rank one gives up" in str(failure.value)


def torchrun_env_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "TORCHELASTIC_RUN_ID": "unit-test",
        env.DEVICE: "cpu",
    }.items():
        monkeypatch.setenv(name, value)


def watch_leaving(monkeypatch: pytest.MonkeyPatch, log_dir: Path) -> list[str]:
    """What leaving the group does, in order: the error record written, abort, destroy."""
    import importlib

    from jobs.runtime import failure

    module = importlib.import_module("jobs.runtime.distributed")  # the package's name is a function

    calls: list[str] = []
    record = failure.record_rank_error
    abort = module._abort_process_group
    destroy = dist.destroy_process_group

    def recording(exc: BaseException) -> None:
        record(exc)
        calls.append(f"record {sorted(p.name for p in log_dir.iterdir())}")

    def aborting(group: Any = None) -> None:
        calls.append("abort")
        abort(group)

    def destroying(group: Any = None) -> None:
        calls.append(f"destroy {sorted(p.name for p in log_dir.iterdir())}")
        destroy(group)

    monkeypatch.setattr(module, "record_rank_error", recording)
    monkeypatch.setattr(module, "_abort_process_group", aborting)
    monkeypatch.setattr(dist, "destroy_process_group", destroying)
    return calls


def test_on_error_the_record_is_written_then_the_group_aborted_never_destroyed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    torchrun_env_of_one(monkeypatch)
    monkeypatch.setenv(env.LOG_DIR, str(tmp_path))
    calls = watch_leaving(monkeypatch, tmp_path)
    with pytest.raises(MemoryError), lb.distributed():
        assert dist.is_initialized()
        raise MemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
    assert calls == ["record ['rank-0.error.json']", "abort"]
    assert not dist.is_initialized()
    assert "[launchbay] rank 0 failed (MemoryError: CUDA out of memory" in capfd.readouterr().err

    # The record is one the worker reads (worker/outcome.py), naming the error and where.
    from worker.outcome import read_error_records

    (found,) = read_error_records(tmp_path, restart=0).values()
    assert (found.rank, found.exit_code) == (0, 1)
    assert found.error == "MemoryError: CUDA out of memory. Tried to allocate 8.00 GiB"
    assert "test_on_error_the_record_is_written" in found.traceback
    assert found.traceback.rstrip().endswith(found.error)


def test_on_success_the_rank_is_marked_finished_then_the_group_destroyed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Marked before the teardown: a rank torchrun stops inside it (after a peer's abort at
    exit) has still finished its work."""
    torchrun_env_of_one(monkeypatch)
    monkeypatch.setenv(env.LOG_DIR, str(tmp_path))
    calls = watch_leaving(monkeypatch, tmp_path)
    with lb.distributed():
        assert dist.is_initialized()
        assert list(tmp_path.iterdir()) == []
    assert calls == ["destroy ['rank-0.finished']"]
    assert not dist.is_initialized()
    # No error record; the mark that lets an abort at interpreter exit count as a success.
    assert [p.name for p in tmp_path.iterdir()] == ["rank-0.finished"]
    assert json.loads((tmp_path / "rank-0.finished").read_text()) == {"restart": 0}


def test_a_rank_stopped_by_a_signal_is_not_recorded_as_failed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    torchrun_env_of_one(monkeypatch)
    monkeypatch.setenv(env.LOG_DIR, str(tmp_path))
    calls = watch_leaving(monkeypatch, tmp_path)
    with pytest.raises(KeyboardInterrupt), lb.distributed():
        raise KeyboardInterrupt
    assert calls == ["abort"]
