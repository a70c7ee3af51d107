"""The rank entry's command line, error text, and what it leaves when the program ends."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from worker.rank_main import format_error, local_rank_flag, parse_argv


def test_parse_argv() -> None:
    assert parse_argv(["--log-dir", "/l", "--module", "m", "--module", "x"]) == (
        Path("/l"),
        None,
        "module",
        "m",
        ["--module", "x"],
    )
    assert parse_argv(["--log-dir", "/l", "--local-rank-arg", "--script", "t.py", "-a"]) == (
        Path("/l"),
        "auto",
        "script",
        "t.py",
        ["-a"],
    )


def test_the_local_rank_spelling_is_chosen_or_read_from_the_script(tmp_path: Path) -> None:
    argv = ["--log-dir", "/l", "--local-rank-arg=underscore", "--script", "t.py"]
    assert parse_argv(argv)[1] == "underscore"
    tutorial = tmp_path / "tutorial.py"
    tutorial.write_text('parser.add_argument("--local_rank", type=int, default=-1)\n')
    both = tmp_path / "both.py"
    both.write_text('parser.add_argument("--local-rank", "--local_rank", type=int)\n')
    assert local_rank_flag("auto", "script", str(tutorial)) == "--local_rank"
    assert local_rank_flag("auto", "script", str(both)) == "--local-rank"
    assert local_rank_flag("auto", "module", "jobs.recipes.digits") == "--local-rank"
    assert local_rank_flag("auto", "script", str(tmp_path / "missing.py")) == "--local-rank"
    assert local_rank_flag("dash", "script", str(tutorial)) == "--local-rank"
    assert local_rank_flag("underscore", "module", "m") == "--local_rank"


@pytest.mark.parametrize(
    "argv", [[], ["--script", "t.py"], ["--log-dir", "/l"], ["--log-dir", "/l", "t.py"]]
)
def test_bad_argv(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_argv(argv)


def test_format_error_keeps_the_chain() -> None:
    try:
        try:
            raise KeyError("inner")
        except KeyError as exc:
            raise RuntimeError("outer") from exc
    except RuntimeError as exc:
        summary, text = format_error(exc)
    assert summary == "RuntimeError: outer"
    assert "KeyError: 'inner'" in text and text.rstrip().endswith("RuntimeError: outer")


RANK_MAIN = Path(__file__).resolve().parents[3] / "worker" / "rank_main.py"


def run_rank(tmp_path: Path, program: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(program))
    env = {k: v for k, v in os.environ.items() if k != "LAUNCHBAY_LAUNCHER_PID"}
    argv = [sys.executable, "-I", "-u", str(RANK_MAIN), "--log-dir", str(tmp_path)]
    return subprocess.run(
        [*argv, "--script", str(script)],
        # Its temporary files in the test's directory, not the host's.
        env={**env, "RANK": "1", "TORCHELASTIC_RESTART_COUNT": "2", "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("ending", ["", "import sys; sys.exit(0)"])
def test_a_program_that_finished_leaves_its_mark_and_its_group_released(
    tmp_path: Path, ending: str
) -> None:
    """What the worker needs to read a SIGABRT at interpreter exit as the known torch + gloo
    abort after the work was done: the rank's `.finished` of this restart, and no process group
    left for exit to tear down (atexit runs after the wrapper's teardown)."""
    done = run_rank(
        tmp_path,
        f"""
        import atexit, os, tempfile
        import torch.distributed as dist
        store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        atexit.register(lambda: print("at exit initialized:", dist.is_initialized()))
        {ending}
        """,
    )
    assert done.returncode == 0, done
    assert json.loads((tmp_path / "rank-1.finished").read_text()) == {"restart": 2}
    log = (tmp_path / "rank-1.log").read_text().splitlines()
    assert log[-1] == "at exit initialized: False", log


@pytest.mark.parametrize("ending", ["raise ValueError('no')", "import sys; sys.exit(3)"])
def test_a_program_that_failed_leaves_no_finished_mark(tmp_path: Path, ending: str) -> None:
    failed = run_rank(tmp_path, ending)
    assert failed.returncode != 0
    assert (tmp_path / "rank-1.error.json").exists()
    assert not (tmp_path / "rank-1.finished").exists()
