"""The SDK against a fake API: headers, errors, retries, paging, wait."""

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from client import (
    ApiError,
    Client,
    Conflict,
    ConnectionFailed,
    ExitReason,
    InvalidRequest,
    NotFound,
    ServiceUnavailable,
    Unauthorized,
    WaitTimeout,
)
from tests.unit.client.conftest import API_URL, FakeApi, error_body, job, metric_point, reply


def test_reads_url_and_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHBAY_API_URL", "http://env.test:9000/")
    monkeypatch.setenv("LAUNCHBAY_TOKEN", "from-env")
    api = FakeApi().on("GET", "/v1/health", reply(200, {"status": "ok"}))
    with Client(transport=api.transport) as lb:
        assert lb.get_health() == {"status": "ok"}
    (request,) = api.requests
    assert str(request.url) == "http://env.test:9000/v1/health"
    assert request.headers["Authorization"] == "Bearer from-env"


def test_defaults_to_localhost_and_sends_no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAUNCHBAY_API_URL", raising=False)
    monkeypatch.delenv("LAUNCHBAY_TOKEN", raising=False)
    api = FakeApi().on("GET", "/v1/health", reply(200, {"status": "ok"}))
    with Client(transport=api.transport) as lb:
        lb.get_health()
    assert str(api.requests[0].url) == "http://127.0.0.1:8000/v1/health"
    assert "Authorization" not in api.requests[0].headers


def test_error_body_becomes_api_error_fields(api: FakeApi, lb: Client) -> None:
    api.on("GET", "/v1/jobs/nope", error_body(404, "not_found", "no job nope", {"id": "nope"}))
    with pytest.raises(NotFound) as caught:
        lb.get_job("nope")
    error = caught.value
    assert isinstance(error, ApiError)
    assert (error.status, error.code, error.message, error.detail) == (
        404,
        "not_found",
        "no job nope",
        {"id": "nope"},
    )


@pytest.mark.parametrize(
    ("answer", "kind", "code", "message"),
    [
        (reply(422, {"detail": [{"loc": ["body"]}]}), InvalidRequest, "unprocessable_entity", None),
        (reply(401, {"detail": "Not authenticated"}), Unauthorized, "unauthorized", "Not auth"),
        (reply(409, text="busy"), Conflict, "conflict", "busy"),
        (reply(502, text="<html>bad gateway</html>"), ApiError, "bad_gateway", "<html>"),
    ],
)
def test_other_error_shapes_still_give_code_and_message(
    api: FakeApi,
    lb: Client,
    answer: Callable[[httpx.Request], httpx.Response],
    kind: type,
    code: str,
    message: str | None,
) -> None:
    api.on("GET", "/v1/jobs/j1", answer)
    with pytest.raises(ApiError) as caught:
        lb.get_job("j1")
    assert type(caught.value) is kind
    assert caught.value.code == code
    if message:
        assert caught.value.message.startswith(message)


def test_get_is_retried_on_503(api: FakeApi, lb: Client) -> None:
    unavailable = error_body(503, "unavailable", "redis down")
    api.on("GET", "/v1/jobs/j1", unavailable, unavailable, reply(200, job()))
    assert lb.get_job("j1").id == "j1"
    assert len(api.requests) == 3


def test_retries_are_few_then_the_503_is_raised(api: FakeApi, lb: Client) -> None:
    api.on("GET", "/v1/jobs/j1", error_body(503, "unavailable", "redis down"))
    with pytest.raises(ServiceUnavailable):
        lb.get_job("j1")
    assert len(api.requests) == lb.retries + 1


def test_get_is_retried_after_a_dropped_connection(api: FakeApi, lb: Client) -> None:
    api.on("GET", "/v1/jobs/j1", httpx.ReadError("reset"), reply(200, job()))
    assert lb.get_job("j1").state == "running"


def test_plain_post_is_never_retried(api: FakeApi, lb: Client) -> None:
    api.on("POST", "/v1/jobs", error_body(503, "unavailable", "redis down"), reply(201, job()))
    with pytest.raises(ServiceUnavailable):
        lb.submit_job({"name": "demo", "recipe": "synthetic"})
    assert len(api.requests) == 1


def test_plain_post_is_not_retried_after_a_network_error(api: FakeApi, lb: Client) -> None:
    api.on("POST", "/v1/jobs/j1/cancel", httpx.ReadError("reset"), reply(202, job()))
    with pytest.raises(ConnectionFailed):
        lb.cancel_job("j1")
    assert len(api.requests) == 1


def test_submit_with_an_idempotency_key_is_retried(api: FakeApi, lb: Client) -> None:
    api.on("POST", "/v1/jobs", httpx.ReadTimeout("slow"), reply(201, job(state="queued")))
    spec = {"name": "demo", "recipe": "synthetic"}
    assert lb.submit_job(spec, idempotency_key="k-1").state == "queued"
    assert len(api.requests) == 2
    for request in api.requests:
        assert request.headers["Idempotency-Key"] == "k-1"
        assert json.loads(request.content) == spec


def test_connection_failure_names_the_url(api: FakeApi, lb: Client) -> None:
    api.on("GET", "/v1/jobs", httpx.ConnectError("[Errno 111] Connection refused"))
    with pytest.raises(ConnectionFailed) as caught:
        lb.list_jobs()
    assert caught.value.url == API_URL
    assert f"cannot reach Launchbay at {API_URL}" in str(caught.value)
    assert "LAUNCHBAY_API_URL" in str(caught.value)
    assert len(api.requests) == lb.retries + 1


def test_list_sends_only_the_filters_given(api: FakeApi, lb: Client) -> None:
    api.on("GET", "/v1/jobs", reply(200, {"items": [job()], "total": 1}))
    lb.list_jobs()
    lb.list_jobs(state="failed", limit=5, offset=10)
    assert dict(api.requests[0].url.params) == {"limit": "50", "offset": "0"}
    assert dict(api.requests[1].url.params) == {"state": "failed", "limit": "5", "offset": "10"}


def test_delete_answers_none_on_204(api: FakeApi, lb: Client) -> None:
    api.on("DELETE", "/v1/jobs/j1", reply(204))
    lb.delete_job("j1")
    assert api.requests[0].method == "DELETE"


def test_ids_are_quoted_into_the_path(api: FakeApi, lb: Client) -> None:
    api.on("DELETE", "/v1/tokens/a/b", reply(204))  # the fake routes on the decoded path
    lb.revoke_token("a/b")
    assert api.requests[0].url.raw_path == b"/v1/tokens/a%2Fb"


def test_iter_metrics_follows_next_after(api: FakeApi, lb: Client) -> None:
    def page(request: httpx.Request) -> httpx.Response:
        after = int(request.url.params["after"])
        seqs = [s for s in range(after + 1, 6)][:2]
        items = [metric_point(s, "loss", 1 / s) for s in seqs]
        return httpx.Response(200, json={"items": items, "next_after": seqs[-1] if seqs else after})

    api.on("GET", "/v1/jobs/j1/metrics", page)
    points = list(lb.iter_metrics("j1", name="loss", page_size=2))
    assert [p.seq for p in points] == [1, 2, 3, 4, 5]
    assert [r.url.params["after"] for r in api.requests] == ["0", "2", "4"]
    assert all(r.url.params["name"] == "loss" for r in api.requests)


def test_iter_logs_passes_rank(api: FakeApi, lb: Client) -> None:
    api.on("GET", "/v1/jobs/j1/logs", reply(200, {"items": [], "next_after": 0}))
    assert list(lb.iter_logs("j1", rank=1)) == []
    assert api.requests[0].url.params["rank"] == "1"


def test_wait_polls_until_terminal(api: FakeApi, lb: Client) -> None:
    api.on(
        "GET",
        "/v1/jobs/j1",
        reply(200, job(state="queued")),
        reply(200, job(state="running")),
        reply(200, job(state="failed", exit_reason="user_error")),
    )
    assert lb.wait_for_job("j1", poll_s=0).exit_reason is ExitReason.USER_ERROR
    assert len(api.requests) == 3


def test_wait_times_out(api: FakeApi, lb: Client) -> None:
    api.on("GET", "/v1/jobs/j1", reply(200, job(state="running")))
    with pytest.raises(WaitTimeout) as caught:
        lb.wait_for_job("j1", timeout=0.05, poll_s=0.01)
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.state == "running"


def test_upload_code_sends_a_multipart_file(api: FakeApi, lb: Client, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    api.on("POST", "/v1/code", reply(201, {"code_id": "c1", "sha256": "ab", "size": 12}))
    assert lb.upload_code(script).code_id == "c1"
    request = api.requests[0]
    assert request.headers["Content-Type"].startswith("multipart/form-data")
    assert b'name="file"; filename="train.py"' in request.content
    assert b"print('hi')" in request.content


def test_create_token_sends_expiry_only_when_given(api: FakeApi, lb: Client) -> None:
    api.on("POST", "/v1/tokens", reply(201, {"name": "ci", "role": "user", "token": "t"}))
    lb.create_token("ci")
    lb.create_token("ci", role="admin", expires_at="2030-01-01T00:00:00Z")
    bodies = [json.loads(r.content) for r in api.requests]
    assert bodies == [
        {"name": "ci", "role": "user"},
        {"name": "ci", "role": "admin", "expires_at": "2030-01-01T00:00:00Z"},
    ]


def test_ready_raises_naming_what_is_down_without_retrying(api: FakeApi, lb: Client) -> None:
    checks = {"database": "ok", "redis": "error: ConnectionError"}
    api.on("GET", "/v1/ready", error_body(503, "unavailable", "not ready: redis", checks))
    with pytest.raises(ServiceUnavailable) as caught:
        lb.get_readiness()
    assert caught.value.detail == checks
    assert len(api.requests) == 1
