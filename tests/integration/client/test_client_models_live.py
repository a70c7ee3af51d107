"""The SDK's typed records against the live API: its OpenAPI document and its real answers;
`AsyncClient` over HTTP; HEAD on a download; `launchbay checkpoints` on a real job."""

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from client import AsyncClient, Client, NotFound
from client.cli import CliState, app
from client.models import (
    Artifact,
    ArtifactPage,
    Checkpoint,
    CodeUpload,
    CreatedToken,
    Job,
    JobPage,
    Limits,
    LogPage,
    MetricPage,
    Recipe,
    Token,
    UploadedCode,
    Usage,
)
from jobs.states import ExitReason, JobState
from service import records
from tests.integration.client.conftest import ADMIN_TOKEN, LiveApi

SPEC = {"name": "it-models", "recipe": "synthetic", "tags": {"team": "vision"}}

# Each record, and the route whose answer it is: the schema is found from the route, so a
# renamed schema on the server does not hide a change of its fields.
RECORDS: list[tuple[type[BaseModel], str, str, bool]] = [
    (Job, "get", "/v1/jobs/{job_id}", False),
    (JobPage, "get", "/v1/jobs", False),
    (MetricPage, "get", "/v1/jobs/{job_id}/metrics", False),
    (LogPage, "get", "/v1/jobs/{job_id}/logs", False),
    (Checkpoint, "get", "/v1/jobs/{job_id}/checkpoints", True),
    (Recipe, "get", "/v1/recipes", True),
    (Token, "get", "/v1/tokens", True),
    (CreatedToken, "post", "/v1/tokens", False),
    (UploadedCode, "post", "/v1/code", False),
    (UploadedCode, "get", "/v1/code/{code_id}", False),
    (CodeUpload, "get", "/v1/code", True),
    (Usage, "get", "/v1/usage", False),
    (Limits, "get", "/v1/limits", False),
    (ArtifactPage, "get", "/v1/jobs/{job_id}/artifacts", False),
    (Artifact, "get", "/v1/jobs/{job_id}/artifacts", True),
]


def test_the_records_match_the_openapi_document(live_api: LiveApi) -> None:
    document = httpx.get(f"{live_api.url}/openapi.json").json()
    schemas = document["components"]["schemas"]
    for model, method, path, in_items in RECORDS:
        schema = _success_schema(document, schemas, method, path)
        if in_items:
            schema = _resolve(schemas, schema["properties"]["items"]["items"])
        _same_fields(model, schema, schemas, f"{method.upper()} {path}")


def test_real_answers_fill_the_records_exactly(live_api: LiveApi, tmp_path: Path) -> None:
    with live_api.client() as lb:
        job = lb.submit_job(SPEC)
        live_api.start(job.id)
        _produce(live_api, job.id)
        live_api.add_checkpoint(job.id, b"w" * 4096)
        live_api.finish(
            job.id, JobState.FAILED, exit_code=1, exit_reason=ExitReason.USER_ERROR, message="x"
        )
        done = lb.get_job(job.id)
        assert done.state is JobState.FAILED and done.exit_reason is ExitReason.USER_ERROR
        assert done.is_terminal() and done.message == "x"
        records: list[BaseModel] = [
            done,
            *lb.list_jobs().items,
            *lb.iter_metrics(job.id),
            *lb.iter_logs(job.id),
            *lb.list_checkpoints(job.id),
            *lb.list_recipes(),
            lb.create_token("reader"),
            *lb.list_tokens(),
            lb.upload_code(_script(tmp_path)),
        ]
        events = list(lb.stream_events(job.id))
    for record in records:
        assert record.model_extra == {}, f"{type(record).__name__} left out {record.model_extra}"
    assert events[-1].is_terminal and events[-1].data["state"] == "failed"
    # model_dump(mode="json") is the API's own JSON.
    raw = httpx.get(f"{live_api.url}/v1/jobs/{job.id}", headers=_admin()).json()
    assert Job.model_validate(raw).model_dump(mode="json") == _same_times(raw)


def test_the_async_client_does_what_the_client_does(live_api: LiveApi, tmp_path: Path) -> None:
    data = b"async checkpoint " * 10_000

    async def scenario() -> None:
        async with AsyncClient(live_api.url, ADMIN_TOKEN, backoff_s=0) as lb:
            jobs = await asyncio.gather(
                *(lb.submit_job({**SPEC, "name": f"a{i}"}) for i in range(3))
            )
            assert len({j.id for j in jobs}) == 3
            job = jobs[0]
            assert (await lb.get_job(job.id)).state is JobState.QUEUED
            assert (await lb.list_jobs(name="a1")).items[0].id == jobs[1].id
            live_api.start(job.id)
            _produce(live_api, job.id)
            live_api.add_checkpoint(job.id, data)
            live_api.finish(
                job.id, JobState.SUCCEEDED, exit_code=0, exit_reason=ExitReason.COMPLETED
            )
            points = [p async for p in lb.iter_metrics(job.id, page_size=1)]
            assert [(p.step, p.value) for p in points] == [(1, 0.5), (2, 0.25)]
            lines = [item.line async for item in lb.iter_logs(job.id)]
            assert lines == ["[bold]one[/]", "two"]
            events = [e async for e in lb.stream_events(job.id)]
            assert [e.data["state"] for e in events if e.event == "state"][-1] == "succeeded"
            assert (await lb.wait_for_job(job.id, timeout=10)).exit_reason is ExitReason.COMPLETED
            (checkpoint,) = await lb.list_checkpoints(job.id)
            target = await lb.download_checkpoint(job.id, "best", tmp_path / "a.pt")
            assert target.read_bytes() == data
            assert checkpoint.sha256 == hashlib.sha256(data).hexdigest()
            assert (await lb.cancel_job(jobs[1].id)).state is JobState.CANCELLED
            await lb.delete_job(jobs[1].id)
            with pytest.raises(NotFound):
                await lb.get_job(jobs[1].id)
            assert (await lb.get_health())["status"] == "ok"
            assert "synthetic" in [r.name for r in await lb.list_recipes()]
            created = await lb.create_token("async-user")
            assert "async-user" in [t.name for t in await lb.list_tokens()]
            await lb.revoke_token(created.name)
            assert (await lb.upload_code(_script(tmp_path))).size > 0

    asyncio.run(scenario())


def test_head_on_a_download_answers_its_headers_only(live_api: LiveApi) -> None:
    data = b"0123456789" * 1000
    with live_api.client() as lb:
        job_id = lb.submit_job(SPEC).id
        live_api.start(job_id)
        live_api.add_checkpoint(job_id, data)
    url = f"{live_api.url}/v1/jobs/{job_id}/checkpoints/latest/download"
    get = httpx.get(url, headers=_admin())
    head = httpx.head(url, headers=_admin())
    assert head.status_code == 200 and head.content == b""
    for name in ("content-length", "etag", "accept-ranges", "content-type"):
        assert head.headers[name] == get.headers[name]
    assert head.headers["content-length"] == str(len(data))
    assert head.headers["etag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    ranged = httpx.head(url, headers={**_admin(), "Range": "bytes=10-19"})
    assert ranged.status_code == 206 and ranged.content == b""
    assert ranged.headers["content-range"] == f"bytes 10-19/{len(data)}"
    missing = httpx.head(url.replace("latest", "nope"), headers=_admin())
    assert missing.status_code == 404
    assert httpx.head(url).status_code == 401


def test_the_cli_lists_a_jobs_checkpoints(live_api: LiveApi) -> None:
    with live_api.client() as lb:
        job_id = lb.submit_job(SPEC).id
        live_api.start(job_id)
        first = live_api.add_checkpoint(job_id, b"a" * 10, name="step-1.pt")
        second = live_api.add_checkpoint(job_id, b"b" * 10, name="step-2.pt")
    state = CliState(api_url=live_api.url, token=ADMIN_TOKEN)
    result = CliRunner(env={"COLUMNS": "80"}).invoke(
        app, ["checkpoints", job_id, "--json"], obj=state
    )
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [(c["id"], c["marks"]) for c in listed] == [(first, []), (second, ["best", "latest"])]
    table = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["checkpoints", job_id], obj=state)
    rows = {line.split()[0]: line.split() for line in table.stdout.splitlines() if line[:1] != " "}
    assert rows[second][-1] == "best,latest" and rows[first][-1] != "best,latest"
    assert all(len(line) <= 80 for line in table.stdout.splitlines())


def test_client_and_async_client_have_one_surface() -> None:
    def surface(cls: type) -> set[str]:
        return {name for name in vars(cls) if not name.startswith("_")} - {"close", "aclose"}

    assert surface(Client) == surface(AsyncClient)


def _produce(live_api: LiveApi, job_id: str) -> None:
    with live_api.worker_session() as session:
        points = [
            records.NewMetricPoint(1, 0, "loss", 0.5, time.time()),
            records.NewMetricPoint(2, 0, "loss", 0.25, time.time()),
        ]
        records.append_metric_points(session, job_id, 1, points)
        lines = [
            records.NewLogLine(0, time.time(), "[bold]one[/]"),
            records.NewLogLine(1, time.time(), "two"),
        ]
        records.append_log_lines(session, job_id, 1, lines)


def _script(tmp_path: Path) -> Path:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    return script


def _admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _same_times(raw: dict[str, Any]) -> dict[str, Any]:
    """The API writes `+00:00` or `Z`; pydantic writes `Z`: compare the instants, not the text."""
    out = dict(raw)
    for key in ("created_at", "started_at", "finished_at"):
        if out.get(key):
            out[key] = out[key].replace("+00:00", "Z")
    return out


def _success_schema(
    document: dict[str, Any], schemas: dict[str, Any], method: str, path: str
) -> dict[str, Any]:
    responses = document["paths"][path][method]["responses"]
    ok = responses.get("200") or responses["201"]
    return _resolve(schemas, ok["content"]["application/json"]["schema"])


def _resolve(schemas: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return schemas[ref.rsplit("/", 1)[1]] if ref else schema


def _same_fields(
    model: type[BaseModel], schema: dict[str, Any], schemas: dict[str, Any], where: str
) -> None:
    api_fields = set(schema["properties"])
    ours = set(model.model_fields)
    assert ours == api_fields, f"{model.__name__} vs {where}: {sorted(ours ^ api_fields)}"
    required = {name for name, field in model.model_fields.items() if field.is_required()}
    assert required <= set(schema.get("required", [])), f"{model.__name__} requires more"
    for name, field in model.model_fields.items():
        nested = field.annotation
        prop = schema["properties"][name]
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            _same_fields(nested, _resolve(schemas, prop), schemas, f"{where} .{name}")
        if name in ("state", "exit_reason") and model is Job:
            assert _types(prop) <= {"string", "null"}
        if isinstance(nested, type) and issubclass(nested, list):
            assert _types(prop) == {"array"}


def _types(prop: dict[str, Any]) -> set[str]:
    if "anyOf" in prop:
        return {str(option.get("type")) for option in prop["anyOf"]}
    return {str(prop.get("type"))}
