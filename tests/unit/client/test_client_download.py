"""Checkpoint downloads: Range resume after a broken connection, and the sha256 check."""

import hashlib
from pathlib import Path

import httpx
import pytest

from client import ChecksumMismatch, Client, NotFound
from tests.unit.client.conftest import BrokenStream, FakeApi, error_body

URL = "/v1/jobs/j1/checkpoints/latest/download"
BLOB = bytes(range(256)) * 4096  # 1 MiB
ETAG = f'"{hashlib.sha256(BLOB).hexdigest()}"'


class FileServer:
    """Answers like the service: ETag, Range with 206, If-Range; can cut a body short once."""

    def __init__(self, blob: bytes = BLOB, etag: str = ETAG, cut_at: int | None = None) -> None:
        self.blob, self.etag, self.cut_at = blob, etag, cut_at

    def __call__(self, request: httpx.Request) -> httpx.Response:
        headers = {"ETag": self.etag, "Accept-Ranges": "bytes"}
        start = 0
        range_header = request.headers.get("Range")
        if_range = request.headers.get("If-Range")
        if range_header and (if_range is None or if_range == self.etag):
            start = int(range_header.removeprefix("bytes=").rstrip("-"))
            if start >= len(self.blob):
                return httpx.Response(416, headers={"Content-Range": f"bytes */{len(self.blob)}"})
            end = len(self.blob) - 1
            headers["Content-Range"] = f"bytes {start}-{end}/{len(self.blob)}"
        body = self.blob[start:]
        status = 206 if start else 200
        headers["Content-Length"] = str(len(body))
        if self.cut_at is not None:
            cut, self.cut_at = self.cut_at - start, None
            return httpx.Response(status, headers=headers, stream=BrokenStream(body[:cut]))
        return httpx.Response(status, headers=headers, content=body)


def test_resumes_with_range_after_a_mid_file_disconnect(
    api: FakeApi, lb: Client, tmp_path: Path
) -> None:
    api.on("GET", URL, FileServer(cut_at=300_000))
    seen: list[tuple[int, int | None]] = []
    target = lb.download_checkpoint(
        "j1", "latest", tmp_path / "model.pt", progress=lambda *a: seen.append(a)
    )
    assert target == tmp_path / "model.pt"
    assert target.read_bytes() == BLOB
    assert not (tmp_path / "model.pt.part").exists()
    first, second = api.requests
    assert "Range" not in first.headers
    assert second.headers["Range"] == "bytes=300000-"
    assert second.headers["If-Range"] == ETAG
    assert seen[-1] == (len(BLOB), len(BLOB))


def test_resumes_a_part_file_left_by_an_earlier_call(
    api: FakeApi, lb: Client, tmp_path: Path
) -> None:
    (tmp_path / "model.pt.part").write_bytes(BLOB[:1000])
    api.on("GET", URL, FileServer())
    lb.download_checkpoint("j1", "latest", tmp_path / "model.pt")
    assert (tmp_path / "model.pt").read_bytes() == BLOB
    assert api.requests[0].headers["Range"] == "bytes=1000-"


def test_starts_over_when_the_server_sends_the_whole_file(
    api: FakeApi, lb: Client, tmp_path: Path
) -> None:
    (tmp_path / "model.pt.part").write_bytes(b"stale bytes of another checkpoint")
    api.on("GET", URL, lambda request: httpx.Response(200, headers={"ETag": ETAG}, content=BLOB))
    lb.download_checkpoint("j1", "latest", tmp_path / "model.pt")
    assert (tmp_path / "model.pt").read_bytes() == BLOB


def test_starts_over_when_the_part_is_longer_than_the_file(
    api: FakeApi, lb: Client, tmp_path: Path
) -> None:
    (tmp_path / "model.pt.part").write_bytes(BLOB + b"extra")
    api.on("GET", URL, FileServer())
    lb.download_checkpoint("j1", "latest", tmp_path / "model.pt")
    assert (tmp_path / "model.pt").read_bytes() == BLOB
    assert [r.headers.get("Range") for r in api.requests] == [f"bytes={len(BLOB) + 5}-", None]


def test_checksum_mismatch_raises_and_keeps_nothing(
    api: FakeApi, lb: Client, tmp_path: Path
) -> None:
    api.on("GET", URL, FileServer(etag='"' + "0" * 64 + '"', cut_at=5000))
    with pytest.raises(ChecksumMismatch) as caught:
        lb.download_checkpoint("j1", "latest", tmp_path / "model.pt")
    assert caught.value.expected == "0" * 64
    assert caught.value.actual == hashlib.sha256(BLOB).hexdigest()
    assert list(tmp_path.iterdir()) == []


def test_unquoted_etag_is_accepted(api: FakeApi, lb: Client, tmp_path: Path) -> None:
    api.on("GET", URL, FileServer(etag=ETAG.strip('"')))
    assert lb.download_checkpoint("j1", "latest", tmp_path / "m.pt").read_bytes() == BLOB


def test_missing_folders_are_made(api: FakeApi, lb: Client, tmp_path: Path) -> None:
    api.on("GET", URL, FileServer())
    assert (
        lb.download_checkpoint("j1", "latest", tmp_path / "a" / "b" / "m.pt").read_bytes() == BLOB
    )


def test_default_name_goes_into_a_directory(api: FakeApi, lb: Client, tmp_path: Path) -> None:
    api.on("GET", "/v1/jobs/j1/checkpoints/best/download", FileServer())
    assert lb.download_checkpoint("j1", "best", tmp_path) == tmp_path / "j1-best.pt"


def test_gives_up_after_repeated_disconnects_keeping_the_part(
    api: FakeApi, lb: Client, tmp_path: Path
) -> None:
    first = FileServer(cut_at=1000)

    def breaks_at_once(request: httpx.Request) -> httpx.Response:
        start = int(request.headers["Range"].removeprefix("bytes=").rstrip("-"))
        headers = {"ETag": ETAG, "Content-Range": f"bytes {start}-{len(BLOB) - 1}/{len(BLOB)}"}
        return httpx.Response(206, headers=headers, stream=BrokenStream(b""))

    api.on("GET", URL, first, breaks_at_once)
    target = tmp_path / "m.pt"
    with pytest.raises(Exception, match="cannot reach Launchbay"):
        lb.download_checkpoint("j1", "latest", target)
    assert len(api.requests) == lb.retries + 1
    assert [r.headers.get("Range") for r in api.requests[1:]] == ["bytes=1000-"] * lb.retries
    part = tmp_path / "m.pt.part"
    assert part.read_bytes() == BLOB[:1000]  # what arrived is kept, nothing else
    assert not target.exists()

    # The next call goes on from the part.
    api.requests.clear()
    api.replace("GET", URL, FileServer())
    assert lb.download_checkpoint("j1", "latest", target).read_bytes() == BLOB
    assert [r.headers.get("Range") for r in api.requests] == ["bytes=1000-"]
    assert not part.exists()


def test_missing_checkpoint_is_not_found(api: FakeApi, lb: Client, tmp_path: Path) -> None:
    api.on("GET", URL, error_body(404, "not_found", "job j1 has no checkpoints"))
    with pytest.raises(NotFound, match="no checkpoints"):
        lb.download_checkpoint("j1", "latest", tmp_path / "m.pt")
    assert list(tmp_path.iterdir()) == []
