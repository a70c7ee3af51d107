"""Hostile input. Schemathesis generates requests from the app's own OpenAPI schema (valid
and invalid ones) for every route, in-process over a real SQLite database and a real Redis,
as the admin: no answer may be a 5xx, and every error must be the documented error body.
Then path traversal by hand: checkpoint refs, job ids and uploads that try to leave the
data dir."""

import gzip
import hashlib
import io
import json
import re
import tarfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlmodel import Session

from jobs.spec import JobSpec
from jobs.states import JobState
from service import records
from service.app import create_app
from service.db import make_engine
from service.settings import Settings
from tests.integration.conftest import ADMIN, ADMIN_TOKEN, copy_migrated_sqlite
from tests.integration.test_api_jobs import assert_error_body

# Examples per operation and generation mode; with the seeded-job passes this sends about
# 2,000 requests, twice the 1,000 the test asserts, every operation in both modes. (40 and 25,
# about 4,200 requests, took 30 s of the suite's time for no operation more.)
EXAMPLES = 20
SEEDED_EXAMPLES = 12
MIN_REQUESTS = 1000
CHECKPOINT = b"\x00checkpoint" * 100


@pytest.fixture
def database_url(sqlite_url: str, migrated_sqlite_file: Path) -> str:
    return copy_migrated_sqlite(migrated_sqlite_file, sqlite_url)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # Small upload limits keep generated bodies cheap; the worker-side reaper stays out.
    return settings.model_copy(
        update={"max_upload_bytes": 64 * 1024, "reaper_enabled": False, "max_code_files": 50}
    )


def seed_job(settings: Settings, outside: Path) -> str:
    """An admin's cancelled job with a log line, a metric point and two checkpoints: one
    whose recorded path climbs out of the data dir (a file the API must never serve)."""
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine, expire_on_commit=False) as session:
            job = records.create_job(
                session, JobSpec(name="seed", recipe="synthetic"), owner="admin"
            )
            for state in (JobState.STARTING, JobState.RUNNING):
                assert records.transition_job(session, job.id, state, attempt=1)
            records.append_log_lines(session, job.id, 1, [records.NewLogLine(0, time.time(), "hi")])
            point = records.NewMetricPoint(1, 0, "loss", 0.5, time.time())
            records.append_metric_points(session, job.id, 1, [point])
            folder = settings.checkpoints_dir / job.id
            folder.mkdir(parents=True)
            (folder / "step-1.pt").write_bytes(CHECKPOINT)
            # The file inside comes last: it is `latest`.
            for path in (f"../{outside.name}", f"checkpoints/{job.id}/step-1.pt"):
                records.register_checkpoint(
                    session,
                    job.id,
                    1,
                    path=path,
                    step=1,
                    epoch=0,
                    metrics={"loss": 0.5},
                    size=len(CHECKPOINT),
                    sha256=hashlib.sha256(CHECKPOINT).hexdigest(),
                )
            for state in (JobState.CANCELLING, JobState.CANCELLED):
                assert records.transition_job(session, job.id, state, attempt=1)
            return job.id
    finally:
        engine.dispose()


# What the answers must say of themselves: the statuses, media types, headers and bodies the
# OpenAPI description documents.
CONFORMANCE = [
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def check_answer(response: Any, label: str) -> None:
    """No 5xx; an error is exactly `{"error": {"code", "message", "detail"}}`."""
    assert response.status_code < 500, f"{label}: {response.status_code} {response.text[:500]}"
    if response.status_code < 400:
        return
    if response.request.method == "HEAD":
        # A HEAD answer has no body by definition: the error's headers say what GET would send.
        assert response.content == b"", label
        assert "application/json" in str(response.headers.get("content-type")), label
        return
    try:
        body = json.loads(response.content)
    except ValueError:
        pytest.fail(f"{label}: {response.status_code} without a JSON body: {response.text[:200]}")
    assert isinstance(body, dict) and set(body) == {"error"}, f"{label}: {body}"
    error = body["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message", "detail"}, label
    assert isinstance(error["code"], str) and error["code"], label
    assert isinstance(error["message"], str) and error["message"], label
    assert ADMIN_TOKEN not in response.text, label


@pytest.fixture
def app_schema(settings: Settings) -> Iterator[schemathesis.schemas.BaseSchema]:
    """The schema as the app serves it; loading it starts the app (its lifespan), which is
    stopped again at the end."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(settings))
    try:
        yield schema
    finally:
        asgi.shutdown_lifespans()


def run_operation(
    operation: Any,
    mode: GenerationMode,
    examples: int,
    statuses: Counter[tuple[str, int]],
    adjust: Callable[[Any], Any] = lambda case: case,
    **fixed: Any,
) -> None:
    label = f"{operation.method.upper()} {operation.path} ({mode.value})"

    @hypothesis_settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode, **fixed).map(adjust))
    def run(case: Any) -> None:
        response = case.call(headers=ADMIN, timeout=10)
        statuses[(label, response.status_code)] += 1
        check_answer(response, f"{label}: {case.as_curl_command()}")
        case.validate_response(response, checks=CONFORMANCE, headers=ADMIN)

    try:
        run()
    except Unsatisfiable:
        # Nothing of this operation can be made invalid (no parameters, no body).
        assert mode is GenerationMode.NEGATIVE, label


def with_recipe(case: Any) -> Any:
    if isinstance(case.body, dict):
        body = {k: v for k, v in case.body.items() if k != "code"}
        case.body = {**body, "recipe": "synthetic", "config": {}}
    return case


def test_schemathesis_finds_no_5xx_and_only_the_error_body(
    app_schema: Any, settings: Settings, tmp_path: Path
) -> None:
    outside = tmp_path / "outside-secret.txt"
    outside.write_text("must never be served")
    job_id = seed_job(settings, outside)
    operations = [result.ok() for result in app_schema.get_all_operations()]
    # A DELETE removes what later requests would hit: last.
    operations.sort(key=lambda op: (op.method.upper() == "DELETE", op.path, op.method))
    assert len(operations) >= 18

    statuses: Counter[tuple[str, int]] = Counter()
    started = time.monotonic()
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for operation in operations:
            run_operation(operation, mode, EXAMPLES, statuses)
    # Again on a job that exists, so the routes behind the ownership check are reached too.
    for operation in operations:
        if "{job_id}" not in operation.path:
            continue
        fixed: dict[str, Any] = {"path_parameters": {"job_id": job_id}}
        if "{ref}" in operation.path:
            fixed["path_parameters"]["ref"] = "latest"  # and fuzz the Range header
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            run_operation(operation, mode, SEEDED_EXAMPLES, statuses, **fixed)
    # Specs that name a real recipe, so submissions get past validation to the policy, the
    # rate limit, the database and the queue.
    submit = next(op for op in operations if (op.method.upper(), op.path) == ("POST", "/v1/jobs"))
    run_operation(submit, GenerationMode.POSITIVE, SEEDED_EXAMPLES * 2, statuses, with_recipe)
    elapsed = time.monotonic() - started

    total = sum(statuses.values())
    by_status = Counter[int]()
    for (_, status), count in statuses.items():
        by_status[status] += count
    print(f"\nschemathesis: {total} requests in {elapsed:.1f} s, by status {dict(by_status)}")
    assert total >= MIN_REQUESTS
    # Only negative cases may lack the token: schemathesis also breaks the security scheme.
    unauthorized = {label for (label, status) in statuses if status == 401}
    assert all(label.endswith("(negative)") for label in unauthorized), unauthorized
    reached = {label.split(" (")[0] for (label, status) in statuses if status < 400}
    assert len(reached) >= 15, f"few operations ever succeeded: {sorted(reached)}"
    assert outside.read_text() == "must never be served"


# Path traversal, by hand.


def tree(root: Path, skip: Path) -> set[Path]:
    return {p for p in root.rglob("*") if not p.is_relative_to(skip)}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside.txt"
    secret.write_text("outside the data dir")
    return secret


@pytest.mark.parametrize(
    "ref",
    [
        "..",
        "../outside.txt",
        "..%2Foutside.txt",
        "..%2F..%2F..%2Foutside.txt",
        "%2e%2e%2foutside.txt",
        "%2Fetc%2Fpasswd",
        "....%2F%2F",
        "latest%00",
        "ck%5c..%5c..%5coutside.txt",
    ],
)
def test_checkpoint_refs_cannot_leave_the_data_dir(
    api: TestClient, settings: Settings, outside: Path, ref: str
) -> None:
    job_id = seed_job(settings, outside)
    response = api.get(f"/v1/jobs/{job_id}/checkpoints/{ref}/download")
    assert 400 <= response.status_code < 500
    assert b"outside the data dir" not in response.content
    assert_error_body(response, response.status_code)


def test_a_checkpoint_recorded_outside_the_data_dir_is_not_served(
    api: TestClient, settings: Settings, outside: Path
) -> None:
    job_id = seed_job(settings, outside)
    items = api.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
    escaping = next(c for c in items if c["path"].startswith(".."))
    response = api.get(f"/v1/jobs/{job_id}/checkpoints/{escaping['id']}/download")
    assert_error_body(response, 404, "not_found")
    assert api.get(f"/v1/jobs/{job_id}/checkpoints/latest/download").content == CHECKPOINT
    # A link planted in the checkpoint dir is refused the same way.
    link = settings.checkpoints_dir / job_id / "step-1.pt"
    link.unlink()
    link.symlink_to(outside)
    first = next(c for c in items if not c["path"].startswith(".."))
    for ref in (first["id"], "latest", "best"):
        response = api.get(f"/v1/jobs/{job_id}/checkpoints/{ref}/download")
        assert_error_body(response, 404, "not_found")
    assert b"outside the data dir" not in response.content


@pytest.mark.parametrize(
    "job_id",
    [
        "..",
        "..%2F..%2Foutside.txt",
        "%2e%2e",
        "..%5c..%5c",
        "x%00y",
        "%2Ftmp",
        "a" * 300,
    ],
)
def test_job_ids_cannot_reach_files(
    api: TestClient, settings: Settings, outside: Path, job_id: str
) -> None:
    for folder in (settings.checkpoints_dir, settings.runs_dir):
        folder.mkdir(parents=True, exist_ok=True)
    before = tree(outside.parent, settings.data_dir)
    for method, suffix in (
        ("GET", ""),
        ("DELETE", ""),
        ("POST", "/cancel"),
        ("GET", "/logs"),
        ("GET", "/checkpoints"),
        ("GET", "/checkpoints/latest/download"),
        ("GET", "/events"),
    ):
        response = api.request(method, f"/v1/jobs/{job_id}{suffix}")
        assert 400 <= response.status_code < 500, (method, suffix, response.status_code)
        assert b"outside the data dir" not in response.content
    assert outside.exists() and tree(outside.parent, settings.data_dir) == before


def _zip(name: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr(name, b"print('escaped')\n")
    return buffer.getvalue()


def _tar(name: str, link: str | None = None) -> bytes:
    buffer = io.BytesIO()
    # mtime=0: the same bytes (and test ids) in every collection, as parallel runs need
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tf,
    ):
        info = tarfile.TarInfo(name)
        if link is not None:
            info.type, info.linkname = tarfile.SYMTYPE, link
            tf.addfile(info)
        else:
            data = b"print('escaped')\n"
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("filename", "content"),
    [
        ("../../../escaped.py", b"print('x')\n"),
        ("..\\..\\escaped.py", b"print('x')\n"),
        ("/tmp/escaped.py", b"print('x')\n"),
        ("code.zip", _zip("../../escaped.py")),
        ("code.zip", _zip("/tmp/escaped.py")),
        ("code.tar.gz", _tar("../../escaped.py")),
        ("code.tar.gz", _tar("/tmp/escaped.py")),
        ("code.tar.gz", _tar("link", link="../../..")),
        ("x" * 300 + ".zip", _zip("escaped.py")),
    ],
)
def test_uploads_write_nothing_outside_the_data_dir(
    api: TestClient, settings: Settings, outside: Path, filename: str, content: bytes
) -> None:
    before = tree(outside.parent, settings.data_dir)
    response = api.post("/v1/code", files={"file": (filename, content, "application/octet-stream")})
    assert response.status_code in (201, 422), response.text
    if response.status_code == 201:
        stored = settings.code_dir / response.json()["code_id"]
        assert [p.name for p in stored.iterdir()] == ["escaped.py"]
    else:
        assert_error_body(response, 422)
    assert tree(outside.parent, settings.data_dir) == before
    assert not Path("/tmp/escaped.py").exists()
    assert all(
        p.resolve().is_relative_to(settings.data_dir.resolve())
        for p in settings.data_dir.rglob("*")
    )


@pytest.mark.parametrize("filename", [b"a\x00.zip", b"a\x1b[2J.py", b"x" * 300 + b".zip"])
def test_upload_file_names_that_cannot_be_stored_are_refused(
    api: TestClient, settings: Settings, filename: bytes
) -> None:
    body = (
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="' + filename + b'"\r\n'
        b"Content-Type: application/zip\r\n\r\n" + _zip("escaped.py") + b"\r\n--B--\r\n"
    )
    headers = {"content-type": "multipart/form-data; boundary=B"}
    response = api.post("/v1/code", content=body, headers=headers)
    assert_error_body(response, 422, "invalid_upload")
    assert list(settings.code_dir.iterdir()) == []


# What schemathesis' coverage phase asks of every path, by hand: an undocumented method is 405
# with `Allow` naming every documented one.

UNDOCUMENTED = ("GET", "POST", "PUT", "PATCH", "DELETE")


def test_an_undocumented_method_is_405_allowing_every_documented_one(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    checked = 0
    for template, item in paths.items():
        documented = {m.upper() for m in item if m.upper() in UNDOCUMENTED}
        path = re.sub(r"\{[^}]+\}", "x", template)
        for method in sorted(set(UNDOCUMENTED) - documented):
            answer = api.request(method, path)
            assert answer.status_code == 405, f"{method} {template}: {answer.status_code}"
            allow = {m.strip() for m in answer.headers["allow"].split(",")}
            assert allow - {"HEAD"} == documented, f"{method} {template}: Allow: {allow}"
            assert answer.json()["error"]["code"] == "method_not_allowed"
            checked += 1
    assert checked > 40


def test_the_documented_answers_of_replays_and_metrics(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/v1/jobs", "/v1/code"):
        assert {"200", "201"} <= set(paths[path]["post"]["responses"]), path
    metrics = paths["/metrics"]["get"]["responses"]
    assert set(metrics["4XX"]["content"]) == {"application/json"}
    refused = api.get("/metrics", headers={"Authorization": ""})
    assert refused.status_code == 401
    assert refused.headers["content-type"].startswith("application/json")
