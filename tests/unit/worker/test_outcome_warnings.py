"""What an attempt's warnings say (worker.outcome_warnings), from the ranks' group records, and
what a failure that needs CUDA says on a worker without it (worker.outcome)."""

import json
from pathlib import Path

import pytest

from jobs.contract.checkpoints import CheckpointPolicy
from jobs.states import ExitReason
from tests.unit.worker.test_outcome import write_failure
from worker.launch import RunPaths
from worker.outcome import classify_exit
from worker.outcome_warnings import (
    MAX_WARNING_CHARS,
    best_metric_warning,
    group_warning,
    last_printed_line,
    nearest,
    nothing_warning,
)


def ranks(log_dir: Path, *records: dict[str, int] | None) -> Path:
    """Rank logs for ranks 0..n-1 and, where given, the rank's group record (defaults filled)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for rank, record in enumerate(records):
        (log_dir / f"rank-{rank}.log").write_text("")
        if record is not None:
            full = {"pid": 100 + rank, "rank": rank, "world_size": 2, "restart": 0}
            full |= {"collectives": 5, "backend": "gloo", **record}
            (log_dir / f"rank-{rank}.group").write_text(json.dumps(full))
    return log_dir


def test_ranks_that_trained_as_one_group_need_no_warning(tmp_path: Path) -> None:
    logs = ranks(tmp_path, {}, {})
    assert group_warning(logs, launcher="torchrun", world_size=2) is None
    assert group_warning(ranks(tmp_path / "one", None), launcher="torchrun", world_size=1) is None


def test_ranks_that_never_formed_one_group_are_named(tmp_path: Path) -> None:
    cases = {
        "rank 0: no process group; rank 1: no process group": ((None, None), 0),
        "rank 1: rank 0 of a group of 1": (({}, {"rank": 0, "world_size": 1}), 0),
        # accelerate on CPU without ACCELERATE_USE_CPU: a group of 2, and a copy per rank.
        "rank 0: rank 0 of a group of 2 that ran no collective": (({"collectives": 0}, {}), 0),
        # A record left before the last elastic restart says nothing of the run after it.
        "); each": (({"restart": 1}, {}), 1),
    }
    for said, (records, restart) in cases.items():
        logs = ranks(tmp_path / str(len(said)), *records)
        warning = group_warning(logs, launcher="torchrun", world_size=2, restart=restart)
        assert warning is not None, said
        assert said.replace("); each", "(rank 1: no process group)") in warning, warning
        assert warning.startswith("the ranks never trained as one process group of WORLD_SIZE=2")


def test_records_written_for_another_rank_do_not_count(tmp_path: Path) -> None:
    """One process writing every rank's record (a program faking the group) counts for none;
    nor does a record that is not JSON, or a link."""
    logs = ranks(tmp_path, {"pid": 7}, {"pid": 7})
    warning = group_warning(logs, launcher="torchrun", world_size=2)
    assert warning is not None and "rank 0: no process group; rank 1: no process group" in warning
    (logs / "rank-1.group").write_text("{not json")
    (logs / "rank-0.group").unlink()
    (logs / "rank-0.group").symlink_to(tmp_path / "elsewhere.json")
    warning = group_warning(logs, launcher="torchrun", world_size=2)
    assert warning is not None and "rank 0: no process group" in warning


def test_a_python_launcher_needs_one_group_of_more_than_one(tmp_path: Path) -> None:
    assert group_warning(ranks(tmp_path / "a", {}, {}), launcher="python", world_size=2) is None
    for i, records in enumerate(((None,), ({"world_size": 1},), ({"collectives": 0}, {}))):
        logs = ranks(tmp_path / str(i), *records)
        if i == 2:
            (logs / "rank-1.group").unlink()
        warning = group_warning(logs, launcher="python", world_size=2)
        assert warning is not None and warning.startswith("WORLD_SIZE=2, but no process"), i
    assert group_warning(ranks(tmp_path / "b"), launcher="python", world_size=1) is None


def test_the_nothing_warning_quotes_the_last_line_cut_short(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    log.write_text("Unable to locate sufficient 2 gpus. Exiting." + "!" * 10_000 + "\n\n")
    log.write_text(log.read_text() + "[launchbay] its own line\n[environment] ready\n")
    line = last_printed_line(log)
    assert line is not None and line.startswith("Unable to locate")
    warning = nothing_warning(line)
    assert "'Unable to locate sufficient 2 gpus. Exiting.!!!" in warning
    assert len(warning) <= MAX_WARNING_CHARS
    assert nothing_warning(None).endswith("no output file written")
    assert last_printed_line(tmp_path / "none.log") is None


def test_the_nearest_name() -> None:
    assert nearest("acc", ["loss", "accuracy", "lr"]) == "accuracy"
    assert nearest("val_accuracy", ["loss", "eval_accuracy", "accuracy"]) == "eval_accuracy"
    assert nearest("loss", []) is None


def test_a_best_metric_no_checkpoint_reported() -> None:
    policy = CheckpointPolicy(best_metric="acc", best_mode="max")
    said = best_metric_warning(policy, [{"accuracy": 0.9, "loss": 0.1}, None], ["lr"])
    assert said == (
        "best_metric 'acc' was never reported by a checkpoint (reported: 'accuracy', 'loss', "
        "'lr'); the nearest reported name is 'accuracy': no checkpoint was deleted for not "
        "being the best"
    )
    assert best_metric_warning(policy, [{"acc": 0.9}], []) is None
    assert best_metric_warning(policy, [], ["accuracy"]) is None, "no checkpoint: nothing kept"
    assert best_metric_warning(CheckpointPolicy(), [{"loss": 1.0}]) is None
    # A flood of long names is listed in part, and the warning stays short.
    names = {f"metric_{i:03d}_" + "n" * 110: 1.0 for i in range(1000)}
    flood = best_metric_warning(policy, [names], [])
    assert flood is not None and "and 995 more" in flood and len(flood) <= MAX_WARNING_CHARS


CUDA_ERRORS = {
    "set_device on a CPU build": (
        "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'",
        "CUDA",
    ),
    ".cuda() on a CPU build": ("AssertionError: Torch not compiled with CUDA enabled", "CUDA"),
    "nccl on a CPU build": (
        "RuntimeError: Distributed package doesn't have NCCL built in",
        "CUDA and NCCL",
    ),
    "nccl without a GPU": (
        "DistBackendError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
        "CUDA and NCCL",
    ),
    "a CUDA build without a driver": (
        "RuntimeError: Found no NVIDIA driver on your system.",
        "CUDA",
    ),
    "the tutorial's own check": (
        "AssertionError: Requires at least 2 GPUs to run, but got 0",
        "CUDA",
    ),
}


@pytest.mark.parametrize("error,needs", CUDA_ERRORS.values(), ids=CUDA_ERRORS.keys())
def test_a_program_that_needs_cuda_says_so_on_a_worker_without(
    tmp_path: Path, error: str, needs: str
) -> None:
    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    write_failure(paths, 1, error, error)
    outcome = classify_exit(
        1, paths=paths, launcher="torchrun", ranks_started=True, cuda_available=False
    )
    assert outcome.reason == ExitReason.USER_ERROR
    assert outcome.message is not None
    head, rest = outcome.message.split("\n", 1)
    assert head.startswith(f"the program needs {needs}, but this worker has no CUDA"), head
    assert rest.startswith(f"rank 1 failed (exit code 1): {error}")
    # On a worker with CUDA the same error is the program's own.
    on_gpu = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert on_gpu.message is not None and "has no CUDA" not in on_gpu.message


def test_other_errors_on_a_cpu_worker_name_no_cuda(tmp_path: Path) -> None:
    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    write_failure(paths, 0, "ValueError: bad shape", "ValueError: bad shape")
    outcome = classify_exit(
        1, paths=paths, launcher="torchrun", ranks_started=True, cuda_available=False
    )
    assert outcome.message is not None and "CUDA" not in outcome.message
