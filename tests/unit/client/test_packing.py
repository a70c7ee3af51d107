"""Packing a directory for `launchbay run`: which files, one deterministic archive, and the
refusals before anything is uploaded (over a limit, nothing left, unreadable files)."""

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from client.errors import PackError
from client.models import Limits
from client.packing import pack_directory, packed_directory
from client.selection import select_files
from service.archives import Unpacker, UnpackLimits, unpack_tar

LIMITS = Limits(max_upload_bytes=1 << 30, max_code_files=1000, max_code_unpacked_bytes=1 << 30)


def tree(root: Path, files: dict[str, bytes | str]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def members(archive: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive, "r:gz") as tar:
        return {member.name: member for member in tar.getmembers()}


def test_the_same_tree_gives_the_same_bytes_whatever_its_times_and_order(tmp_path: Path) -> None:
    first = tree(tmp_path / "a", {"train.py": "print(1)\n", "lib/util.py": "X = 1\n"})
    second = tree(tmp_path / "b", {"lib/util.py": "X = 1\n", "train.py": "print(1)\n"})
    os.utime(second / "train.py", (1, 1))
    (second / "lib" / "util.py").chmod(0o600)
    (first / "train.py").chmod(0o755)
    (second / "train.py").chmod(0o700)
    with packed_directory(first, LIMITS) as one, packed_directory(second, LIMITS) as two:
        assert one.sha256 == two.sha256 and one.path.read_bytes() == two.path.read_bytes()
        found = members(one.path)
    assert list(found) == ["lib/util.py", "train.py"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in found.values()} == {
        (0, 0, 0, "", "")
    }
    assert (found["train.py"].mode, found["lib/util.py"].mode) == (0o755, 0o644)
    (first / "train.py").write_text("print(2)\n")
    with packed_directory(first, LIMITS) as changed:
        assert changed.sha256 != one.sha256


def test_gitignore_files_are_honoured_without_git(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            ".gitignore": "*.log\ndata/\n!keep.log\n",
            "train.py": "",
            "run.log": "",
            "keep.log": "",
            "data/big.bin": "",
            "sub/.gitignore": "*.tmp\n!run.log\n",
            "sub/a.tmp": "",
            "sub/b.py": "",
            "sub/run.log": "",
            "other/a.tmp": "",
            ".git/config": "",
            ".launchbayignore": "secret.txt\nnotes/\n",
            "secret.txt": "",
            "notes/todo.md": "",
        },
    )
    assert select_files(root).files == [
        ".gitignore",
        ".launchbayignore",
        "keep.log",
        "other/a.tmp",
        "sub/.gitignore",
        "sub/b.py",
        "sub/run.log",
        "train.py",
    ]


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_in_a_git_work_tree_git_says_what_is_ignored(tmp_path: Path) -> None:
    root = tree(
        tmp_path / "repo", {"train.py": "", "gone.py": "", "proj/t.py": "", "proj/x.ckpt": ""}
    )
    git(root, "init", "-q")
    (root / ".git" / "info" / "exclude").write_text("*.ckpt\n")  # only git reads this file
    git(root, "add", "gone.py")
    (root / "gone.py").unlink()  # tracked, deleted from the tree: not packed
    (root / ".launchbayignore").write_text("train.py\n")
    assert select_files(root).files == [".launchbayignore", "proj/t.py"]
    assert select_files(root / "proj").files == ["t.py"]  # a subdirectory: its own paths


def test_a_link_out_of_the_directory_is_never_followed(tmp_path: Path) -> None:
    outside = tree(tmp_path / "outside", {"secret.txt": "TOP-SECRET-BYTES", "d/key": "KEY-BYTES"})
    root = tree(tmp_path / "project", {"train.py": "print(1)\n"})
    (root / "secret.txt").symlink_to(outside / "secret.txt")
    (root / "keys").symlink_to(outside / "d")
    (root / "self").symlink_to(root / "train.py")
    with packed_directory(root, LIMITS) as packed:
        data = packed.path.read_bytes()
        names = list(members(packed.path))
    assert names == ["train.py"]
    assert {path for path, _ in packed.skipped} == {"secret.txt", "keys", "self"}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        raw = b"".join(tar.extractfile(m).read() for m in tar.getmembers())  # type: ignore[union-attr]
    assert b"SECRET" not in raw and b"KEY-BYTES" not in raw


def test_a_launchbayignore_that_excludes_everything_is_refused(tmp_path: Path) -> None:
    root = tree(tmp_path, {"train.py": "", "lib/a.py": "", ".launchbayignore": "*\n"})
    with pytest.raises(PackError) as refused:
        pack_directory(root, LIMITS, tmp_path / "out.tar.gz")
    assert refused.value.code == "nothing_to_pack"


def test_over_the_upload_limit_it_is_refused_naming_the_biggest_files(tmp_path: Path) -> None:
    root = tree(
        tmp_path / "p",
        {
            "train.py": "print(1)\n",
            "data/big.bin": os.urandom(300_000),
            "ckpt.pt": os.urandom(200_000),
        },
    )
    small = LIMITS.model_copy(update={"max_upload_bytes": 100_000})
    with pytest.raises(PackError) as refused:
        pack_directory(root, small, tmp_path / "out.tar.gz")
    error = refused.value
    assert error.code == "payload_too_large"
    assert "data/big.bin (293.0 KiB), ckpt.pt (195.3 KiB), train.py" in error.message
    assert [b["path"] for b in error.detail["biggest"]] == ["data/big.bin", "ckpt.pt", "train.py"]
    assert (tmp_path / "out.tar.gz").stat().st_size <= 100_000  # stopped at the limit

    unpacked = LIMITS.model_copy(update={"max_code_unpacked_bytes": 250_000})
    with pytest.raises(PackError) as refused:
        pack_directory(root, unpacked, tmp_path / "out.tar.gz")
    assert refused.value.code == "archive_too_large" and "data/big.bin" in refused.value.message
    few = LIMITS.model_copy(update={"max_code_files": 2})
    with pytest.raises(PackError) as refused:
        pack_directory(root, few, tmp_path / "out.tar.gz")
    assert refused.value.code == "archive_too_large" and "3 files" in refused.value.message


def test_unreadable_files_are_named_and_nothing_is_packed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(tmp_path, {"train.py": "", "a/locked.bin": "x", "z.key": "k"})
    for name in ("a/locked.bin", "z.key"):
        (root / name).chmod(0)
    if os.geteuid() == 0:  # root reads a mode-0 file: refuse it as the kernel would a user
        real_open = os.open

        def refusing_open(path: os.PathLike[str], flags: int, *args: int) -> int:
            if Path(path).stat().st_mode & 0o777 == 0:
                raise PermissionError(13, "Permission denied")
            return real_open(path, flags, *args)

        monkeypatch.setattr("client.packing.os.open", refusing_open)
    with pytest.raises(PackError) as refused:
        pack_directory(root, LIMITS, tmp_path / "out.tar.gz")
    assert refused.value.code == "unreadable_file"
    assert "a/locked.bin: Permission denied; z.key: Permission denied" in refused.value.message


ODD = ["a file with spaces.py", "ünïcødé/数据.txt", "line\nbreak.txt", "-rf", "#hash*?[x].py"]


def test_odd_names_are_packed_as_they_are_and_the_server_unpacks_them(tmp_path: Path) -> None:
    root = tree(tmp_path / "p", {name: f"content of {name!r}" for name in ["train.py", *ODD]})
    (root / "back\\slash.py").write_text("")
    (root / os.fsdecode(b"latin-\xe9.txt")).write_text("")
    with packed_directory(root, LIMITS) as packed:
        assert sorted(packed.files) == sorted(["train.py", *ODD])
        assert {path for path, _ in packed.skipped} == {"back\\slash.py", "latin-\udce9.txt"}
        target = tmp_path / "unpacked"
        target.mkdir()
        unpack_tar(packed.path, Unpacker(target, UnpackLimits(max_files=100, max_bytes=1 << 20)))
    for name in ["train.py", *ODD]:
        assert (target / name).read_text() == f"content of {name!r}"
