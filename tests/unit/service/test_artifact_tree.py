"""A directory as one canonical tar stream: the same files give the same bytes, any range of
it can be served alone, and what is not a plain file is refused."""

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from service.artifacts.tree import (
    TreeDigest,
    TreeRefused,
    extract_tar,
    iter_tar,
    scan_tree,
    tar_size,
)


def make_tree(root: Path) -> dict[str, bytes]:
    files = {
        "model.safetensors": os.urandom(3000),
        "optimizer.pt": b"",
        "sub/deeper/__0_0.distcp": os.urandom(513),
        "é-unicode.json": b'{"step": 500}',
        "x" * 120 + "/long-name.bin": os.urandom(10),  # a PAX header of its own
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def whole(root: Path) -> TreeDigest:
    digest = TreeDigest(root, scan_tree(root))
    digest.body = b"".join(digest.stream())  # type: ignore[attr-defined]
    return digest


def test_the_stream_is_canonical_a_tar_and_hashed_with_its_manifest(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    files = make_tree(first)
    second.mkdir()
    for rel, data in sorted(files.items(), reverse=True):  # another order, other times
        (second / rel).parent.mkdir(parents=True, exist_ok=True)
        (second / rel).write_bytes(data)
        os.utime(second / rel, (1, 1))
    one, two = whole(first), whole(second)
    body = one.body  # type: ignore[attr-defined]
    assert body == two.body  # type: ignore[attr-defined]
    assert one.sha256 == hashlib.sha256(body).hexdigest() == two.sha256
    assert one.size == len(body) == tar_size([(f.path, f.size) for f in scan_tree(first)])
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        read = {m.name: archive.extractfile(m).read() for m in archive}  # type: ignore[union-attr]
    assert read == files
    assert {e.path: e.sha256 for e in one.manifest} == {
        rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()
    }
    (second / "optimizer.pt").write_bytes(b"1")
    assert whole(second).sha256 != one.sha256


def test_any_range_of_the_stream_is_the_same_bytes_as_the_whole(tmp_path: Path) -> None:
    make_tree(tmp_path)
    listing = [(f.path, f.size) for f in scan_tree(tmp_path)]
    body = b"".join(iter_tar(tmp_path, listing))
    assert body == whole(tmp_path).body  # type: ignore[attr-defined]
    for start, end in [(0, 1), (0, 512), (100, 4000), (511, 513), (len(body) - 1024, None), (7, 7)]:
        part = b"".join(iter_tar(tmp_path, listing, start, end))
        assert part == body[start:end], (start, end)


def test_what_is_not_a_plain_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ok.bin").write_bytes(b"x")
    (tmp_path / "link").symlink_to("/etc/passwd")
    with pytest.raises(TreeRefused, match="link"):
        scan_tree(tmp_path)
    empty = tmp_path / "empty"
    (empty / "only-dirs").mkdir(parents=True)
    with pytest.raises(TreeRefused, match="no files"):
        scan_tree(empty)


def test_a_file_that_changed_size_stops_the_stream(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"x" * 100)
    listing = [(f.path, f.size) for f in scan_tree(tmp_path)]
    (tmp_path / "a.bin").write_bytes(b"x" * 50)
    with pytest.raises(TreeRefused, match="changed since it was listed"):
        b"".join(iter_tar(tmp_path, listing))


@pytest.mark.parametrize("name", ["../escape", "/abs/path", "a/../../b"])
def test_unpacking_refuses_paths_out_of_the_directory(tmp_path: Path, name: str) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = 1
        archive.addfile(info, io.BytesIO(b"x"))
    buffer.seek(0)
    with pytest.raises(TreeRefused):
        extract_tar(buffer, tmp_path / "out")
    assert not (tmp_path / "escape").exists()


def test_unpacking_refuses_links(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("evil")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(info)
    buffer.seek(0)
    with pytest.raises(TreeRefused, match="not a regular file"):
        extract_tar(buffer, tmp_path / "out")


def test_a_link_swapped_in_after_the_listing_is_not_followed(tmp_path: Path) -> None:
    """The worker (root) and the API read directories the job's user may still change."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 10)
    root = tmp_path / "ckpt"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "w.bin").write_bytes(b"w" * 10)
    (root / "a.bin").write_bytes(b"a" * 10)
    files = scan_tree(root)
    (root / "a.bin").unlink()
    (root / "a.bin").symlink_to(secret)  # same size, a link now
    with pytest.raises(TreeRefused):
        b"".join(TreeDigest(root, files).stream())
    with pytest.raises(TreeRefused):
        b"".join(iter_tar(root, [(f.path, f.size) for f in files]))

    (root / "a.bin").unlink()
    (root / "a.bin").write_bytes(b"a" * 10)
    files = scan_tree(root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "w.bin").write_bytes(b"x" * 10)
    os.rename(root / "sub", tmp_path / "moved")
    (root / "sub").symlink_to(elsewhere)  # a directory above a listed file
    with pytest.raises(TreeRefused):
        b"".join(TreeDigest(root, files).stream())
    with pytest.raises(TreeRefused, match="leads out"):
        b"".join(iter_tar(root, [(f.path, f.size) for f in files]))
