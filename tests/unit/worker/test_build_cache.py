"""An owner's run-time builds (torch extensions) are kept between its jobs, and only its own."""

import os
from pathlib import Path

import pytest

from worker import build_cache
from worker.build_cache import RELATIVE, owner_cache


def built(home: Path, name: str = "deepspeed_shm_comm") -> Path:
    folder = home / RELATIVE / name
    folder.mkdir(parents=True)
    (folder / f"{name}.so").write_bytes(b"\x7fELF" + b"0" * 100)
    (folder / "build.ninja").write_text("rule cxx\n")
    return folder


def test_what_a_run_built_reaches_the_owners_next_run_and_no_other_owners(tmp_path: Path) -> None:
    data, first, second, stranger = (tmp_path / n for n in ("data", "h1", "h2", "h3"))
    built(first)
    assert build_cache.save(data, "alice", first)

    assert build_cache.restore(data, "alice", second)
    assert (second / RELATIVE / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").read_bytes()[
        :4
    ] == (b"\x7fELF")
    assert not build_cache.restore(data, "mallory", stranger)
    assert not (stranger / ".cache").exists()
    assert owner_cache(data, "alice") != owner_cache(data, "mallory")
    assert os.stat(data / "build-cache").st_mode & 0o077 == 0, "jobs cannot read the cache"


def test_a_later_run_replaces_the_owners_builds_whole(tmp_path: Path) -> None:
    data, first, second = tmp_path / "data", tmp_path / "h1", tmp_path / "h2"
    built(first, "old_op")
    build_cache.save(data, "alice", first)
    built(second, "new_op")
    build_cache.save(data, "alice", second)
    assert sorted(p.name for p in owner_cache(data, "alice").iterdir()) == ["new_op"]


def test_links_a_job_planted_are_never_followed_or_kept(tmp_path: Path) -> None:
    data, home, secret = tmp_path / "data", tmp_path / "home", tmp_path / "secret.txt"
    secret.write_text("the worker's")
    folder = built(home)
    (folder / "leak.so").symlink_to(secret)
    (home / RELATIVE / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    build_cache.save(data, "alice", home)
    kept = owner_cache(data, "alice")
    assert sorted(p.name for p in kept.iterdir()) == ["deepspeed_shm_comm"]
    assert not (kept / "deepspeed_shm_comm" / "leak.so").exists()

    linked_home = tmp_path / "linked"
    (linked_home / ".cache").mkdir(parents=True)
    (linked_home / RELATIVE).symlink_to(home / RELATIVE, target_is_directory=True)
    assert not build_cache.save(data, "bob", linked_home)
    # A link higher up: $HOME/.cache made a link to another owner's cache (issue 34, item 5).
    dotted_home = tmp_path / "dotted"
    dotted_home.mkdir()
    (dotted_home / ".cache").symlink_to(kept.parent, target_is_directory=True)
    assert not build_cache.save(data, "bob", dotted_home)
    assert not owner_cache(data, "bob").exists()


def test_a_build_killed_half_way_is_not_kept(tmp_path: Path) -> None:
    """torch's build lock left behind would make every later job wait for it forever."""
    data, home = tmp_path / "data", tmp_path / "home"
    built(home, "finished")
    (built(home, "killed") / "lock").touch()
    build_cache.save(data, "alice", home)
    assert sorted(p.name for p in owner_cache(data, "alice").iterdir()) == ["finished"]


def test_builds_over_the_limit_are_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_cache, "MAX_BYTES", 50)
    data, home = tmp_path / "data", tmp_path / "home"
    built(home)
    assert not build_cache.save(data, "alice", home)
    assert not owner_cache(data, "alice").exists()


def test_under_a_job_user_torch_builds_in_the_runs_home_unless_the_job_says(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert build_cache.env(home, {}) == {"TORCH_EXTENSIONS_DIR": str(home / RELATIVE)}
    mine = {"TORCH_EXTENSIONS_DIR": "/scratch/mine"}
    assert build_cache.env(home, mine) == mine


def test_a_build_keeps_its_times_so_ninja_finds_it_up_to_date(tmp_path: Path) -> None:
    data, first, second = tmp_path / "data", tmp_path / "h1", tmp_path / "h2"
    so = built(first) / "deepspeed_shm_comm.so"
    os.utime(so, ns=(1_000_000_000, 1_700_000_000_123_456_789))
    build_cache.save(data, "alice", first)
    build_cache.restore(data, "alice", second)
    copied = second / RELATIVE / "deepspeed_shm_comm" / "deepspeed_shm_comm.so"
    assert copied.stat().st_mtime_ns == 1_700_000_000_123_456_789
