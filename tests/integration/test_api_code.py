"""Uploading user code (`POST /v1/code`) and submitting jobs that run it, on SQLite and
PostgreSQL: every accepted format, and archives built to escape or exhaust the data dir."""

import gzip
import hashlib
import io
import os
import stat
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, func, select

from jobs.spec import CodeRef
from service import code_store
from service.archives import MAX_MEMBER_DEPTH
from service.db import make_engine
from service.errors import Unprocessable
from service.models import CodeUpload
from service.settings import Settings
from tests.integration.conftest import count_jobs
from tests.integration.test_api_jobs import assert_error_body

TRAIN = b"print('training')\n"
MAX_UPLOAD = 64 * 1024
MAX_FILES = 20
MAX_UNPACKED = 1024 * 1024
MULTIPART = "multipart/form-data"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Small limits, so the tests can cross them cheaply."""
    return settings.model_copy(
        update={
            "max_upload_bytes": MAX_UPLOAD,
            "max_code_files": MAX_FILES,
            "max_code_unpacked_bytes": MAX_UNPACKED,
        }
    )


# Archives, built in memory.


def make_zip(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buffer.getvalue()


def tar_member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> Any:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, (io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def make_tgz(*members: Any) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for info, data in members:
            tf.addfile(info, data)
    return buffer.getvalue()


def raw_tgz(*headers: tuple[bytes, bytes]) -> bytes:
    """A tar.gz of hand-made (type, data) header blocks, then one ordinary member."""
    blocks = b""
    for kind, data in headers:
        info = tarfile.TarInfo("././@LongLink")
        info.type, info.size = kind, len(data)
        blocks += info.tobuf(tarfile.GNU_FORMAT) + data + b"\0" * (-len(data) % 512)
    member = tarfile.TarInfo("train.py")
    member.size = len(TRAIN)
    blocks += member.tobuf(tarfile.GNU_FORMAT) + TRAIN.ljust(512, b"\0") + b"\0" * 1024
    return gzip.compress(blocks)


def zip_declaring_directory(size: int) -> bytes:
    """A small zip whose end record declares a central directory of `size` bytes."""
    archive = bytearray(make_zip({"train.py": TRAIN}))
    end = archive.rfind(b"PK\x05\x06")
    archive[end + 12 : end + 16] = size.to_bytes(4, "little")
    return bytes(archive)


def pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n"
    length = len(body) + len(str(len(body)))
    length = len(body) + len(str(length))
    return f"{length}{body}".encode()


def upload(api: TestClient, filename: str, content: bytes) -> Any:
    return api.post("/v1/code", files={"file": (filename, content, "application/octet-stream")})


# What the upload left on disk and in the database.


def snapshot(root: Path) -> set[str]:
    """Every path under `root`, as rglob("*") lists them (symlinked directories not entered);
    by os.walk, as strings: the session's temporary directory these tests watch holds the files
    of every test the process ran before, and Path objects for each made a snapshot seconds."""
    found: set[str] = set()
    for folder, dirs, files in os.walk(root):
        found.update(os.path.join(folder, name) for name in (*dirs, *files))
    return found


def code_rows(settings: Settings) -> list[CodeUpload]:
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            return list(session.exec(select(CodeUpload)).all())
    finally:
        engine.dispose()


class DirWatch:
    """Checks, after a refused upload, that nothing was written outside the data dir and
    nothing is left in the code dir (no partial upload, no half-unpacked directory)."""

    def __init__(self, tmp_path: Path, settings: Settings) -> None:
        self.settings = settings
        self.marker = f"escaped-{uuid.uuid4().hex}"  # the name escaping members try to write
        self.session_dir = tmp_path.parent  # every test's tmp_path of this session
        self.before = snapshot(self.session_dir)

    def __call__(self) -> None:
        data_dir = self.settings.data_dir.resolve()
        new = {
            p
            for p in map(Path, snapshot(self.session_dir) - self.before)
            if not p.is_relative_to(data_dir)
        }
        assert new == set(), f"written outside the data dir: {sorted(new)}"
        code_dir = self.settings.code_dir
        for folder in (code_dir, *code_dir.parents, Path("/tmp")):
            assert not (folder / self.marker).exists(), f"escaped into {folder}"
        leftovers = sorted(p.name for p in code_dir.iterdir()) if code_dir.exists() else []
        assert leftovers == [], f"left in the code dir: {leftovers}"
        assert code_rows(self.settings) == []


@pytest.fixture
def watch_dirs(tmp_path: Path, settings: Settings) -> DirWatch:
    return DirWatch(tmp_path, settings)


# Good uploads.


@pytest.mark.parametrize(
    ("filename", "content", "stored"),
    [
        ("train.py", TRAIN, {"train.py": TRAIN}),
        ("proj.zip", make_zip({"train.py": TRAIN, "pkg/util.py": b"X = 1\n"}), None),
        (
            "proj.tar.gz",
            make_tgz(
                tar_member("pkg", kind=tarfile.DIRTYPE),
                tar_member("pkg/util.py", b"X = 1\n"),
                tar_member("train.py", TRAIN),
            ),
            None,
        ),
        (
            "proj.tgz",
            make_tgz(
                tar_member("./", kind=tarfile.DIRTYPE),
                tar_member("./train.py", TRAIN),
                tar_member("./pkg/util.py", b"X = 1\n"),
            ),
            None,
        ),
    ],
    ids=["py", "zip", "tar.gz", "tgz"],
)
def test_each_format_is_stored_unpacked_under_its_sha256(
    api: TestClient,
    settings: Settings,
    tmp_path: Path,
    filename: str,
    content: bytes,
    stored: dict[str, bytes] | None,
) -> None:
    outside = snapshot(tmp_path.parent)
    response = upload(api, filename, content)
    assert response.status_code == 201, response.text
    digest = hashlib.sha256(content).hexdigest()
    assert response.json() == {"code_id": digest, "sha256": digest, "size": len(content)}

    root = settings.code_dir / digest
    expected = stored or {"train.py": TRAIN, "pkg/util.py": b"X = 1\n"}
    files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert files == expected
    assert sorted(p.name for p in settings.code_dir.iterdir()) == [digest], "no temp files left"
    data_dir = settings.data_dir.resolve()
    assert all(Path(p).is_relative_to(data_dir) for p in snapshot(tmp_path.parent) - outside)

    again = upload(api, filename, content)
    assert again.status_code == 200, "the same bytes again are the same code"
    assert again.json() == response.json()
    [row] = code_rows(settings)
    assert (row.code_id, row.owner, row.filename, row.size) == (
        digest,
        "admin",
        filename,
        len(content),
    )

    job = api.post("/v1/jobs", json={"name": "mine", "code": {"code_id": digest}})
    assert job.status_code == 201, job.text
    assert job.json()["spec"]["code"] == {"code_id": digest, "entrypoint": "train.py"}


def test_the_same_script_under_another_name_is_kept_beside_the_first(
    api: TestClient, settings: Settings
) -> None:
    first = upload(api, "train.py", TRAIN).json()
    second = upload(api, "main.py", TRAIN).json()
    assert first == second
    root = settings.code_dir / first["code_id"]
    assert sorted(p.name for p in root.iterdir()) == ["main.py", "train.py"]
    for entrypoint in ("train.py", "main.py"):
        spec = {"name": "x", "code": {"code_id": first["code_id"], "entrypoint": entrypoint}}
        assert api.post("/v1/jobs", json=spec).status_code == 201


def test_an_entrypoint_in_a_subdirectory_is_accepted(api: TestClient) -> None:
    code_id = upload(api, "p.zip", make_zip({"src/train.py": TRAIN})).json()["code_id"]
    spec = {"name": "x", "code": {"code_id": code_id, "entrypoint": "src/train.py"}}
    assert api.post("/v1/jobs", json=spec).status_code == 201


# Refused uploads.

ZEROS = b"\0" * (2 * MAX_UNPACKED)
NESTED = "d/" * 1500
NOISE = b"".join(hashlib.sha256(bytes([i])).digest() for i in range(200))  # incompressible


def refused_uploads(marker: str) -> list[tuple[str, bytes, int, str]]:
    """(file name, content, status, error code) of uploads that must be refused."""
    deep = "../" * 6
    return [
        ("up.zip", make_zip({"../x": b"1", "train.py": TRAIN}), 422, "invalid_upload"),
        ("deep.zip", make_zip({f"{deep}{marker}": b"1"}), 422, "invalid_upload"),
        ("abs.zip", make_zip({f"/tmp/{marker}": b"1"}), 422, "invalid_upload"),
        ("up.tar.gz", make_tgz(tar_member(f"{deep}{marker}", b"1")), 422, "invalid_upload"),
        ("abs.tgz", make_tgz(tar_member(f"/tmp/{marker}", b"1")), 422, "invalid_upload"),
        ("bs.zip", make_zip({"..\\x": b"1"}), 422, "invalid_upload"),
        ("zlink.zip", make_zip({}, links={"out": "/tmp"}), 422, "invalid_upload"),
        (
            "symlink.tar.gz",
            make_tgz(
                tar_member("out", kind=tarfile.SYMTYPE, link="/tmp"),
                tar_member(f"out/{marker}", b"1"),
            ),
            422,
            "invalid_upload",
        ),
        (
            "hardlink.tar.gz",
            make_tgz(tar_member("passwd", kind=tarfile.LNKTYPE, link="/etc/passwd")),
            422,
            "invalid_upload",
        ),
        ("dev.tgz", make_tgz(tar_member("null", kind=tarfile.CHRTYPE)), 422, "invalid_upload"),
        ("fifo.tgz", make_tgz(tar_member("p", kind=tarfile.FIFOTYPE)), 422, "invalid_upload"),
        (
            "many.zip",
            make_zip({f"f{i}.py": b"" for i in range(MAX_FILES + 1)}),
            413,
            "archive_too_large",
        ),
        (
            "many.tgz",
            make_tgz(*(tar_member(f"f{i}.py", b"") for i in range(MAX_FILES + 1))),
            413,
            "archive_too_large",
        ),
        ("bomb.zip", make_zip({"zeros.bin": ZEROS}), 413, "archive_too_large"),
        (
            "bomb.tar.gz",
            make_tgz(*(tar_member(f"z{i}", ZEROS[: MAX_UNPACKED // 2]) for i in range(3))),
            413,
            "archive_too_large",
        ),
        (
            "dup.tgz",
            make_tgz(tar_member("a.py", b"1"), tar_member("a.py", b"2")),
            422,
            "invalid_upload",
        ),
        ("clash.zip", make_zip({"a": b"1", "a/b.py": b"2"}), 422, "invalid_upload"),
        # Nested past MAX_MEMBER_DEPTH (1,500 levels once broke Python's recursion limit).
        ("nested.zip", make_zip({NESTED + "x.py": b"1"}), 422, "invalid_upload"),
        ("nested.tgz", make_tgz(tar_member(NESTED + "x.py", b"1")), 422, "invalid_upload"),
        (
            "nested-dirs.tgz",
            make_tgz(tar_member(NESTED, kind=tarfile.DIRTYPE)),
            422,
            "invalid_upload",
        ),
        ("empty.zip", make_zip({}), 422, "invalid_upload"),
        ("text.zip", b"this is not a zip archive\n" * 10, 422, "invalid_upload"),
        ("text.tar.gz", b"this is not a tar archive\n" * 10, 422, "invalid_upload"),
        ("zip.tgz", make_zip({"train.py": TRAIN}), 422, "invalid_upload"),
        ("cut.tar.gz", make_tgz(tar_member("a.bin", NOISE))[:2000], 422, "invalid_upload"),
        ("binary.py", b"\x7fELF\x00\x01\x02", 422, "invalid_upload"),
        ("latin.py", "é = 1\n".encode("latin-1"), 422, "invalid_upload"),
        # Extended tar headers are bounded before tarfile reads them.
        (
            "longname.tgz",
            raw_tgz((tarfile.GNUTYPE_LONGNAME, b"a" * 70_000)),
            422,
            "invalid_upload",
        ),
        (
            "pax.tgz",
            raw_tgz((tarfile.XHDTYPE, pax_record("path", "a" * 70_000))),
            422,
            "invalid_upload",
        ),
        (
            "chain.tgz",
            raw_tgz(*[(tarfile.XHDTYPE, pax_record("comment", "x"))] * 9),
            422,
            "invalid_upload",
        ),
        ("sparse.tgz", raw_tgz((tarfile.GNUTYPE_SPARSE, b"")), 422, "invalid_upload"),
        ("directory.zip", zip_declaring_directory(200_000), 413, "archive_too_large"),
        ("tool.exe", b"MZ\x90\x00", 422, "unsupported_file_type"),
        ("train.py.txt", TRAIN, 422, "unsupported_file_type"),
        (".py", TRAIN, 422, "unsupported_file_type"),
    ]


CASES = refused_uploads("MARKER")


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0] for c in CASES])
def test_unsafe_or_invalid_uploads_are_refused_and_leave_nothing(
    api: TestClient, watch_dirs: DirWatch, case: int
) -> None:
    filename, content, status, code = refused_uploads(watch_dirs.marker)[case]
    assert_error_body(upload(api, filename, content), status, code)
    watch_dirs()


def test_errors_name_a_member_by_a_bounded_prefix(api: TestClient, watch_dirs: DirWatch) -> None:
    for archive in (
        make_zip({"../" + "a" * 30_000: b"1"}),
        make_tgz(tar_member("/" + "b" * 30_000, b"1")),
    ):
        name = "long.zip" if archive[:2] == b"PK" else "long.tgz"
        answer = upload(api, name, archive)
        error = assert_error_body(answer, 422, "invalid_upload")
        assert len(answer.content) < 1024
        assert len(error["detail"]["member"]) <= 203
    watch_dirs()


def test_an_archive_nested_as_deep_as_allowed_is_accepted(api: TestClient) -> None:
    name = "d/" * (MAX_MEMBER_DEPTH - 1) + "train.py"
    for filename, archive in (
        ("deep.zip", make_zip({name: TRAIN})),
        ("deep.tgz", make_tgz(tar_member(name, TRAIN))),
    ):
        assert upload(api, filename, archive).status_code == 201


def test_a_small_long_name_or_pax_header_is_still_accepted(api: TestClient) -> None:
    name = "pkg/" + "n" * 150 + ".py"
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", format=fmt) as tf:
            for info, data in (tar_member(name, b"X = 1\n"), tar_member("train.py", TRAIN)):
                tf.addfile(info, data)
        answer = upload(api, f"long-{fmt}.tar.gz", buffer.getvalue())
        assert answer.status_code in (200, 201), answer.text


def test_an_upload_over_the_limit_is_refused_while_it_streams(
    api: TestClient, watch_dirs: DirWatch
) -> None:
    # One byte over, so the body is within the body limit: the service counts the file's bytes.
    content = b"#" * (MAX_UPLOAD + 1)
    assert_error_body(upload(api, "big.py", content), 413, "payload_too_large")
    watch_dirs()
    # No Content-Length at all (chunked), far over the limit.
    boundary = "b" + uuid.uuid4().hex
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.py"\r\n'
        "Content-Type: text/x-python\r\n\r\n"
    ).encode()

    def body() -> Iterator[bytes]:
        yield head
        for _ in range(64):
            yield b"#" * 65536
        yield f"\r\n--{boundary}--\r\n".encode()

    response = api.post(
        "/v1/code",
        content=body(),
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert_error_body(response, 413, "payload_too_large")
    watch_dirs()
    # A declared Content-Length over the body limit is refused before anything is read.
    response = upload(api, "big.py", b"#" * (4 * MAX_UPLOAD))
    assert_error_body(response, 413, "payload_too_large")
    watch_dirs()


def test_an_upload_exactly_at_the_limit_is_accepted(api: TestClient) -> None:
    response = upload(api, "big.py", b"#" * MAX_UPLOAD)
    assert response.status_code == 201, response.text
    assert response.json()["size"] == MAX_UPLOAD


@pytest.mark.parametrize(
    "kwargs",
    [
        {"json": {"file": "train.py"}},
        {"data": {"file": "print(1)"}, "files": {"other": ("a.py", TRAIN)}},
        {"files": {"other": ("train.py", TRAIN)}},
        {
            "content": b"--x\r\nbroken",
            "headers": {"content-type": "multipart/form-data; boundary=x"},
        },
    ],
    ids=["json", "text-field", "other-field", "truncated"],
)
def test_a_body_without_a_file_part_is_refused(
    api: TestClient, watch_dirs: DirWatch, kwargs: dict[str, Any]
) -> None:
    assert_error_body(api.post("/v1/code", **kwargs), 422, "validation_error")
    watch_dirs()


def test_two_file_parts_are_refused(api: TestClient, watch_dirs: DirWatch) -> None:
    files = [("file", ("a.py", TRAIN)), ("file", ("b.py", TRAIN))]
    assert_error_body(api.post("/v1/code", files=files), 422, "validation_error")
    watch_dirs()


# Jobs that name uploaded code.


def test_a_job_naming_unknown_code_is_refused(api: TestClient, settings: Settings) -> None:
    spec = {"name": "x", "code": {"code_id": "a" * 64, "entrypoint": "train.py"}}
    error = assert_error_body(api.post("/v1/jobs", json=spec), 422, "validation_error")
    assert "code.code_id" in error["message"]
    assert error["detail"][0]["loc"] == ["body", "code", "code_id"]
    assert count_jobs(settings) == 0


@pytest.mark.parametrize("entrypoint", ["missing.py", "pkg", "pkg/../../train.py"])
def test_a_job_naming_a_missing_entrypoint_is_refused(
    api: TestClient, settings: Settings, entrypoint: str
) -> None:
    code_id = upload(api, "p.zip", make_zip({"train.py": TRAIN, "pkg/a.py": b""})).json()["code_id"]
    spec = {"name": "x", "code": {"code_id": code_id, "entrypoint": entrypoint}}
    error = assert_error_body(api.post("/v1/jobs", json=spec), 422, "validation_error")
    assert "entrypoint" in error["message"]
    assert count_jobs(settings) == 0


def test_code_is_usable_by_its_owners_and_admins_only(api: TestClient, settings: Settings) -> None:
    code_id = upload(api, "train.py", TRAIN).json()["code_id"]
    ref = CodeRef(code_id=code_id, entrypoint="train.py")
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            code_store.check_code_ref(session, settings.code_dir, ref, owner="admin")
            code_store.check_code_ref(session, settings.code_dir, ref, owner=None)  # an admin
            with pytest.raises(Unprocessable, match="code.code_id"):
                code_store.check_code_ref(session, settings.code_dir, ref, owner="someone-else")
            total = session.exec(select(func.count()).select_from(CodeUpload)).one()
            assert total == 1
    finally:
        engine.dispose()
