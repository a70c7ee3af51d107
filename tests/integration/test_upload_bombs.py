"""Archive bombs sent to a real `launchbay api` process: a gzip of a few hundred KB whose tar
headers declare hundreds of MB, and a zip whose members unpack to far more than the limit.
Each is refused in the error body with the API's memory (read from /proc) growing by less
than 100 MB and nothing left on disk."""

import gzip
import io
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import make_stack
from tests.support.stack import Stack

HEADER_BYTES = 256 * 1024 * 1024  # what the bombs' headers declare and hold
MAX_GROWTH = 100 * 1024 * 1024
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Built once: compressing 256 MiB takes a second or two."""
    root = tmp_path_factory.mktemp("bombs")
    return {
        "long-name.tar.gz": header_bomb(root / "long-name.tar.gz", tarfile.GNUTYPE_LONGNAME),
        "pax.tar.gz": header_bomb(root / "pax.tar.gz", tarfile.XHDTYPE),
        "zeros.zip": zeros_zip(root / "zeros.zip", 1024 * MIB),
    }


def header_bomb(path: Path, kind: bytes) -> Path:
    """A tar.gz whose first header is a GNU long name or a pax header of HEADER_BYTES, then
    one ordinary member."""
    info = tarfile.TarInfo("././@LongLink")
    info.type, info.size = kind, HEADER_BYTES
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(info.tobuf(tarfile.GNU_FORMAT))
        if kind == tarfile.XHDTYPE:
            # One pax record, "<length> comment=<value>\n", its length counting itself.
            value_bytes = HEADER_BYTES - len(f"{HEADER_BYTES} comment=\n")
            out.write(f"{HEADER_BYTES} comment=".encode())
            write_repeated(out, b"a", value_bytes)
            out.write(b"\n")
        else:
            write_repeated(out, b"a", HEADER_BYTES)
        out.write(b"\0" * (-HEADER_BYTES % tarfile.BLOCKSIZE))
        member = tarfile.TarInfo("train.py")
        member.size = len(b"print(1)\n")
        out.write(member.tobuf(tarfile.GNU_FORMAT) + b"print(1)\n".ljust(512, b"\0"))
        out.write(b"\0" * 1024)
    assert path.stat().st_size < 600 * 1024, "the bomb should be about 0.5 MB"
    return path


def zeros_zip(path: Path, size: int) -> Path:
    """A zip that unpacks to `size` bytes: zeros and a script."""
    script = b"print(1)\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("zeros.bin", "w", force_zip64=True) as member:
            write_repeated(member, b"\0", size - len(script))
        zf.writestr("train.py", script)
    return path


def write_repeated(out: Any, byte: bytes, n: int) -> None:
    chunk = byte * MIB
    while n > 0:
        piece = chunk[: min(n, MIB)]
        out.write(piece)
        n -= len(piece)


@pytest.fixture
def stack(tmp_path: Path, sqlite_url: str, redis_url: str) -> Iterator[Stack]:
    stack = make_stack(tmp_path / "stack", sqlite_url, redis_url)
    stack.start_api()
    try:
        yield stack
    finally:
        stack.stop()


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak) of a process, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def reset_peak(pid: int) -> None:
    """Make VmHWM the current RSS again (`5` in clear_refs, Linux 4.0+)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def send(http: httpx.Client, name: str, content: bytes) -> httpx.Response:
    return http.post("/v1/code", files={"file": (name, content, "application/octet-stream")})


@pytest.mark.parametrize("name", ["long-name.tar.gz", "pax.tar.gz", "zeros.zip"])
def test_an_archive_bomb_is_refused_before_the_memory_or_the_disk_fill(
    stack: Stack, bombs: dict[str, Path], name: str
) -> None:
    assert stack.api is not None
    pid = stack.api.pid
    with stack.client() as http:
        # A small archive first, so lazy imports on the upload path are not counted.
        warm = io.BytesIO()
        with tarfile.open(fileobj=warm, mode="w:gz") as tf:
            member = tarfile.TarInfo("warm.py")
            member.size = 9
            tf.addfile(member, io.BytesIO(b"print(1)\n"))
        assert send(http, "warm.tar.gz", warm.getvalue()).status_code == 201
        reset_peak(pid)
        before = memory_kib(pid)
        answer = send(http, name, bombs[name].read_bytes())
        after = memory_kib(pid)
    growth = (after["VmHWM"] - before["VmRSS"]) * 1024
    print(f"{name}: API peak RSS grew by {growth / MIB:.1f} MiB")
    assert answer.status_code in (413, 422), answer.text[:500]
    error = answer.json()["error"]
    assert set(error) == {"code", "message", "detail"}
    assert error["code"] in ("invalid_upload", "archive_too_large")
    assert len(answer.content) < 4096
    assert growth < MAX_GROWTH, f"the API grew by {growth / MIB:.0f} MiB"
    code_dir = stack.data_dir / "code"
    left = sorted(p.name for p in code_dir.iterdir())
    assert len(left) == 1 and not left[0].startswith("."), left  # the warm-up upload only
    stored = sum(f.stat().st_size for f in code_dir.rglob("*") if f.is_file())
    assert stored < MIB
