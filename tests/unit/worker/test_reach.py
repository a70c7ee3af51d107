"""What a job user reaches, decided from modes (worker/reach.py, worker/scratch.py): directories
of the test's own, no job user and no namespace."""

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.reach import Needed, data_dir_problem, unsearchable, why_unreachable
from worker.scratch import masks, masks_below


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A temporary directory others may search (pytest's lie under a 0700 one)."""
    made = Path(tempfile.mkdtemp())
    made.chmod(0o711)
    yield made
    shutil.rmtree(made)


def tree(tmp_path: Path) -> tuple[Path, Path]:
    """home (0700) / .pyenv (0755) / versions / 3.11 / bin / python3.11 (0755)."""
    home = tmp_path / "home"
    binary = home / ".pyenv" / "versions" / "3.11" / "bin" / "python3.11"
    binary.parent.mkdir(parents=True)
    binary.write_text("")
    binary.chmod(0o755)
    home.chmod(0o700)
    return home, binary


def test_the_mask_is_the_topmost_directory_others_may_not_search(tmp_path: Path) -> None:
    home, binary = tree(tmp_path)
    (home / ".pyenv").chmod(0o700)  # a second one, under the first: masked with it
    kept = [str(binary.parent.parent), str(home / "clone")]
    assert masks(kept) == [str(home)]
    assert unsearchable(binary) == home
    # Under a directory the job gets a private copy of (/tmp), the copy is what it passes.
    assert masks(kept, covered=[str(tmp_path)]) == []
    home.chmod(0o755)
    assert masks(kept) == [str(home / ".pyenv")]


def test_below_a_directory_mounted_back_a_closed_one_is_masked_in_turn(tmp_path: Path) -> None:
    """A clone under /tmp is mounted back into the job's /tmp as it is: a 0700 home inside it
    (where a Python lives) is masked there, not above it."""
    clone = tmp_path / "clone"
    home, binary = tree(clone)
    kept = [str(clone), str(binary.parent)]
    assert masks_below(kept, [str(clone)]) == [str(home)]
    assert masks_below(kept, [str(tmp_path / "elsewhere")]) == []
    home.chmod(0o755)
    assert masks_below(kept, [str(clone)]) == []


def test_a_0700_home_is_reached_through_the_namespace_or_named_with_the_ways_out(
    tmp_path: Path,
) -> None:
    home, binary = tree(tmp_path)
    item = Needed("the interpreter", binary, run=True)
    assert why_unreachable(item, None) is None  # the job's namespace masks the home
    said = why_unreachable(item, "no CAP_SYS_ADMIN")
    assert said is not None
    assert said.startswith(f"job users cannot reach the interpreter, {binary}: {home} is not ")
    assert "(mode 0700), and this worker cannot give jobs a mount namespace" in said
    assert f"chmod o+x {home}" in said and "PYTHON=/usr/bin/python3.11" in said


def test_a_file_others_may_not_run_is_named_whatever_the_namespace(tmp_path: Path) -> None:
    _, binary = tree(tmp_path)
    binary.chmod(0o750)
    said = why_unreachable(Needed("the interpreter", binary, run=True), None)
    assert said is not None
    assert f"job users cannot run the interpreter, {binary}: other users may not" in said
    assert f"(mode 0750). Either make it reachable (chmod o+rx {binary})" in said
    binary.chmod(0o751)
    assert why_unreachable(Needed("the interpreter", binary, run=True), None) is None
    assert why_unreachable(Needed("the interpreter", binary), None) is not None  # not readable


def test_a_data_dir_is_refused_under_a_parent_others_may_not_search(tmp_path: Path) -> None:
    parent = tmp_path / "private"
    parent.mkdir(mode=0o700)
    parent.chmod(0o700)
    data = parent / "a" / "data"  # not made yet: its nearest existing directory is judged
    said = data_dir_problem(data, job_users=True)
    assert said is not None
    assert said.startswith(f"job users cannot reach the data dir {data}: {parent} is not")
    assert data_dir_problem(data, job_users=False) is None  # no job users: the worker's own
    parent.chmod(0o711)
    assert data_dir_problem(data, job_users=True) is None
