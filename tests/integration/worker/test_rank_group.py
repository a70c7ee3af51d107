"""The rank entry notes the process group a program forms (worker/rank_group.py), with real
torch and gloo, for programs that never import Launchbay: however they take
`init_process_group`, whether they destroy the group or leave it open, and never at the cost of
the program when the note cannot be written."""

import json
import os
import subprocess
import sys
from pathlib import Path

from worker.launch import RANK_ENTRY

# The function imported by name before anything else, a group of one process, one all-reduce,
# left open; then a second group, formed and destroyed with no collective.
PROGRAM = """
import os, sys, tempfile
from torch.distributed import init_process_group, all_reduce, destroy_process_group
import torch
init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/a", rank=0, world_size=1)
all_reduce(torch.ones(1))
destroy_process_group()
init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/b", rank=0, world_size=1)
print("trained", flush=True)
"""


def run_rank(tmp_path: Path, program: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    script = tmp_path / "train.py"
    script.write_text(program)
    logs = tmp_path / "logs"
    argv = [sys.executable, "-I", "-u", str(RANK_ENTRY), "--log-dir", str(logs)]
    done = subprocess.run(
        [*argv, "--script", str(script)],
        env={**os.environ, "TMPDIR": str(tmp_path)},  # its temporary files: the test's
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, logs


def test_a_group_formed_by_a_program_of_its_own_is_noted(tmp_path: Path) -> None:
    done, logs = run_rank(tmp_path, PROGRAM)
    assert done.returncode == 0, (logs / "rank-0.log").read_text()
    assert "trained" in (logs / "rank-0.log").read_text()
    record = json.loads((logs / "rank-0.group").read_text())
    # The collectives of both groups (the second, left open, noted when the program ended).
    assert {k: record[k] for k in ("rank", "world_size", "backend", "restart")} == {
        "rank": 0,
        "world_size": 1,
        "backend": "gloo",
        "restart": 0,
    }
    assert record["collectives"] >= 1


def test_a_note_that_cannot_be_written_never_fails_the_program(tmp_path: Path) -> None:
    (tmp_path / "logs" / "rank-0.group").mkdir(parents=True)  # os.replace onto it fails
    done, logs = run_rank(tmp_path, PROGRAM)
    assert done.returncode == 0, (logs / "rank-0.log").read_text()
    assert "trained" in (logs / "rank-0.log").read_text()


def test_collectives_on_a_group_of_the_programs_own_count(tmp_path: Path) -> None:
    """DeepSpeed's shape: training runs on a group made from the default one (here one
    all-reduce on it, then the group destroyed on its own), none on the default group."""
    program = """
import tempfile, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/s", rank=0, world_size=1)
group = dist.new_group([0])
dist.all_reduce(torch.ones(1), group=group)
dist.destroy_process_group(group)
"""
    done, logs = run_rank(tmp_path, program)
    assert done.returncode == 0, (logs / "rank-0.log").read_text()
    assert json.loads((logs / "rank-0.group").read_text())["collectives"] >= 1
