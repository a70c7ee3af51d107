"""The data dir's layout: every path where it has always been (running jobs and stored data
live there)."""

from pathlib import Path

from jobs.contract.data_dir import DataLayout

ROOT = Path("/data")
LAYOUT = DataLayout(ROOT)


def test_the_top_level_paths() -> None:
    assert [
        LAYOUT.database,
        LAYOUT.code,
        LAYOUT.envs,
        LAYOUT.runs,
        LAYOUT.checkpoints,
        LAYOUT.artifacts,
        LAYOUT.supervisors,
        LAYOUT.build_cache,
    ] == [
        Path("/data/launchbay.db"),
        Path("/data/code"),
        Path("/data/envs"),
        Path("/data/runs"),
        Path("/data/checkpoints"),
        Path("/data/artifacts"),
        Path("/data/supervisors"),
        Path("/data/build-cache"),
    ]


def test_a_jobs_paths() -> None:
    assert LAYOUT.upload("ab12") == Path("/data/code/ab12")
    assert LAYOUT.job_runs("j1") == Path("/data/runs/j1")
    assert LAYOUT.attempt_dir("j1", 3) == Path("/data/runs/j1/attempt-3")
    assert LAYOUT.run_dir("j1", 3) == Path("/data/runs/j1/attempt-3")
    assert LAYOUT.run_dir("j1", 3, 0) == Path("/data/runs/j1/attempt-3/node-0")
    assert LAYOUT.attempt_checkpoints("j1", 3) == Path("/data/runs/j1/attempt-3/checkpoints")
    assert LAYOUT.slurm_output("j1", 3) == Path("/data/runs/j1/slurm-3.out")
    assert LAYOUT.kept_checkpoints("j1") == Path("/data/checkpoints/j1")
    assert LAYOUT.job_artifacts("j1") == Path("/data/artifacts/j1")
    assert LAYOUT.job_dirs("j1") == (
        Path("/data/runs/j1"),
        Path("/data/checkpoints/j1"),
        Path("/data/artifacts/j1"),
    )
    assert LAYOUT.supervisor_notes("host-a") == Path("/data/supervisors/host-a")
    assert LAYOUT.owner_build_cache("k") == Path("/data/build-cache/k")


def test_the_attempts_checkpoint_directories_in_attempt_order(tmp_path: Path) -> None:
    layout = DataLayout(tmp_path)
    for attempt in (10, 2, 1):
        layout.attempt_checkpoints("j", attempt).mkdir(parents=True)
    (layout.job_runs("j") / "attempt-3").mkdir()  # no checkpoints directory
    assert layout.attempts_checkpoints("j") == [
        tmp_path / "runs/j/attempt-1/checkpoints",
        tmp_path / "runs/j/attempt-2/checkpoints",
        tmp_path / "runs/j/attempt-10/checkpoints",
    ]
    assert DataLayout(tmp_path / "none").attempts_checkpoints("j") == []
