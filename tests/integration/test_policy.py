"""The submission policy, the per-owner rate limit, size limits and secret env values, over a
real SQLite database and a real Redis."""

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from service import policy
from service.app import create_app
from service.db import make_engine, upgrade_database
from service.models import Job
from service.settings import Settings
from tests.integration.conftest import ADMIN_TOKEN, copy_migrated_sqlite, count_jobs
from tests.integration.test_api_jobs import SYNTHETIC, assert_error_body
from tests.integration.test_auth import make_token, send
from tests.support.procs import free_port
from worker.launch import RunPaths, build_env
from worker.prepare import parse_spec

PER_MINUTE = 5


@pytest.fixture
def database_url(sqlite_url: str, migrated_sqlite_file: Path) -> str:
    return copy_migrated_sqlite(migrated_sqlite_file, sqlite_url)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """A strict policy, so the tests can cross each limit."""
    return settings.model_copy(
        update={
            "max_nproc_per_node": 2,
            "max_nnodes": 1,
            "max_timeout_s": 3600.0,
            "allowed_queues": ["default", "cpu"],
            "submissions_per_minute": PER_MINUTE,
            "max_body_bytes": 64 * 1024,
            "max_upload_bytes": 64 * 1024,
        }
    )


@pytest.fixture
def user(api: TestClient) -> str:
    return make_token(api, "user")


def stored_spec(settings: Settings, job_id: str) -> dict[str, Any]:
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            return dict(session.exec(select(Job).where(Job.id == job_id)).one().spec)
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "name",
    [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LAUNCHBAY_TOKEN",
        "LAUNCHBAY_CHECKPOINT_DIR",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "TORCHELASTIC_RUN_ID",
        "PYTHONPATH",
        "pythonpath",
        "PYTHONWARNINGS",
        "BROWSER",
        "GCONV_PATH",
        "MALLOC_ARENA_MAX",
        "CUDA_VISIBLE_DEVICES",
        "cuda_visible_devices",
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
    ],
)
def test_forbidden_env_names_are_refused_for_everyone(
    api: TestClient, settings: Settings, user: str, name: str
) -> None:
    for token in (user, ADMIN_TOKEN):
        spec = {**SYNTHETIC, "env": {"FINE": "1", name: "x"}}
        error = assert_error_body(send(api, "POST", "/v1/jobs", token, json=spec), 422)
        assert error["code"] == "forbidden_env"
        assert name in error["message"]
        assert error["detail"] == [
            {
                "loc": ["body", "env", name],
                "msg": error["detail"][0]["msg"],
                "type": "forbidden_env",
            }
        ]
    assert count_jobs(settings) == 0


def test_ordinary_env_names_pass(api: TestClient, user: str) -> None:
    spec = {**SYNTHETIC, "env": {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "2", "MY_RANKING": "1"}}
    assert send(api, "POST", "/v1/jobs", user, json=spec).status_code == 201


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("nproc_per_node", 3),
        ("nnodes", 2),
        ("queue", "gpu-a100"),
        ("timeout_s", 3601),
    ],
)
def test_limits_bind_users_not_admins(
    api: TestClient, settings: Settings, user: str, field: str, value: Any
) -> None:
    spec = {**SYNTHETIC, field: value}
    error = assert_error_body(send(api, "POST", "/v1/jobs", user, json=spec), 422)
    assert error["code"] == "policy_violation"
    assert [d["loc"] for d in error["detail"]] == [["body", field]]
    assert field in error["message"]
    assert count_jobs(settings) == 0
    admin = send(api, "POST", "/v1/jobs", ADMIN_TOKEN, json=spec)
    assert admin.status_code == 201, admin.text
    assert admin.json()["spec"][field] == value


def test_within_the_limits_a_users_job_gets_the_maximum_timeout(api: TestClient, user: str) -> None:
    spec = {**SYNTHETIC, "nproc_per_node": 2, "queue": "cpu"}
    job = send(api, "POST", "/v1/jobs", user, json=spec).json()
    assert job["spec"]["timeout_s"] == 3600
    shorter = send(api, "POST", "/v1/jobs", user, json={**spec, "name": "b", "timeout_s": 60})
    assert shorter.json()["spec"]["timeout_s"] == 60
    admin = send(api, "POST", "/v1/jobs", ADMIN_TOKEN, json={**spec, "name": "c"}).json()
    assert admin["spec"]["timeout_s"] is None


def test_users_may_be_limited_to_built_in_recipes(
    api: TestClient, settings: Settings, user: str
) -> None:
    settings.allow_user_code = False  # the app holds this very object
    files = {"file": ("train.py", b"print('hi')\n", "text/x-python")}
    refused = send(api, "POST", "/v1/code", user, files=files)
    assert_error_body(refused, 403, "code_not_allowed")
    code_id = send(api, "POST", "/v1/code", ADMIN_TOKEN, files=files).json()["code_id"]
    spec = {"name": "code", "code": {"code_id": code_id, "entrypoint": "train.py"}}
    assert_error_body(send(api, "POST", "/v1/jobs", user, json=spec), 403, "code_not_allowed")
    assert send(api, "POST", "/v1/jobs", ADMIN_TOKEN, json=spec).status_code == 201
    assert send(api, "POST", "/v1/jobs", user, json=SYNTHETIC).status_code == 201


def test_a_flood_of_submissions_is_rate_limited_and_loses_no_job(
    api: TestClient, settings: Settings, user: str
) -> None:
    answers = [
        send(api, "POST", "/v1/jobs", user, json={**SYNTHETIC, "name": f"flood-{i}"})
        for i in range(3 * PER_MINUTE)
    ]
    accepted = [r.json()["id"] for r in answers if r.status_code == 201]
    limited = [r for r in answers if r.status_code == 429]
    # Fixed one-minute windows: a flood that straddles a boundary gets one more window.
    assert len(accepted) in (PER_MINUTE, 2 * PER_MINUTE)
    assert len(accepted) + len(limited) == len(answers)
    for response in limited:
        error = assert_error_body(response, 429, "rate_limited")
        retry_after = int(response.headers["retry-after"])
        assert 1 <= retry_after <= 60
        assert error["detail"]["limit_per_minute"] == PER_MINUTE
    listed = send(api, "GET", "/v1/jobs", user, params={"limit": 1000}).json()
    assert {j["id"] for j in listed["items"]} == set(accepted)
    assert count_jobs(settings) == len(accepted)
    # Per owner: others still get in, and a limited owner's retry of an accepted job replays.
    assert send(api, "POST", "/v1/jobs", ADMIN_TOKEN, json=SYNTHETIC).status_code == 201


def test_a_replay_is_not_refused_for_the_rate(api: TestClient, user: str) -> None:
    key = {"Idempotency-Key": "k1"}
    first = send(api, "POST", "/v1/jobs", user, json=SYNTHETIC, headers=key)
    for i in range(PER_MINUTE):
        send(api, "POST", "/v1/jobs", user, json={**SYNTHETIC, "name": f"n{i}"})
    limited = send(api, "POST", "/v1/jobs", user, json={**SYNTHETIC, "name": "over"})
    replay = send(api, "POST", "/v1/jobs", user, json=SYNTHETIC, headers=key)
    assert (first.status_code, replay.status_code) == (201, 200)
    if limited.status_code != 201:  # unless the minute turned meanwhile
        assert_error_body(limited, 429, "rate_limited")


def test_the_limiter_lets_submissions_through_while_redis_is_down(
    tmp_path: Path, sqlite_url: str
) -> None:
    dead = redis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    for _ in range(3):
        policy.check_submission_rate(dead, "someone", 1)
    upgrade_database(sqlite_url)
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=sqlite_url,
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
        admin_token=ADMIN_TOKEN,
        submissions_per_minute=1,
    )
    with TestClient(create_app(settings)) as api:
        for i in range(3):
            response = send(
                api, "POST", "/v1/jobs", ADMIN_TOKEN, json={**SYNTHETIC, "name": f"{i}"}
            )
            # Stored, and refused only for the queue (which the worker side catches up on).
            assert_error_body(response, 503, "queue_unavailable")
    assert count_jobs(settings) == 3


def test_rate_limit_windows_and_retry_after(settings: Settings) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    start = (time.time() // 60 + 1) * 60 + 0.5  # half a second into a fresh window
    for _ in range(3):
        policy.check_submission_rate(client, "w", 3, now=start)
    with pytest.raises(policy.TooManyRequests) as limited:
        policy.check_submission_rate(client, "w", 3, now=start + 10)
    assert limited.value.headers == {"Retry-After": "50"}
    policy.check_submission_rate(client, "w", 3, now=start + 60)  # the next window
    policy.check_submission_rate(client, "other", 3, now=start + 10)
    policy.check_submission_rate(client, "w", 0, now=start + 10)  # 0: no limit


def test_oversized_bodies_and_uploads_are_413(
    api: TestClient, settings: Settings, user: str
) -> None:
    for token in (user, ADMIN_TOKEN):
        body = json.dumps({**SYNTHETIC, "tags": {"blob": "x" * (65 * 1024)}})
        headers = {"content-type": "application/json"}
        response = send(api, "POST", "/v1/jobs", token, content=body, headers=headers)
        assert_error_body(response, 413, "payload_too_large")
        files = {"file": ("train.py", b"#" * (65 * 1024), "text/x-python")}
        assert_error_body(send(api, "POST", "/v1/code", token, files=files), 413)
    assert count_jobs(settings) == 0
    assert list(settings.code_dir.glob("*")) == []


def test_secret_env_values_are_stored_and_never_shown(
    api: TestClient, settings: Settings, user: str
) -> None:
    secret = "s3cr3t-value-that-must-not-leak"
    spec: dict[str, Any] = {
        **SYNTHETIC,
        "env": {"WANDB_API_KEY": secret, "PLAIN": "visible"},
        "secret_env": ["WANDB_API_KEY"],
    }
    key = {"Idempotency-Key": "secret-1"}
    created = send(api, "POST", "/v1/jobs", user, json=spec, headers=key)
    assert created.status_code == 201
    job_id = created.json()["id"]
    answers = [
        created,
        send(api, "POST", "/v1/jobs", user, json=spec, headers=key),
        send(api, "GET", f"/v1/jobs/{job_id}", user),
        send(api, "GET", "/v1/jobs", user),
        send(api, "GET", "/v1/jobs", ADMIN_TOKEN),
        send(api, "POST", f"/v1/jobs/{job_id}/cancel", user),
    ]
    assert answers[1].status_code == 200, "the same key and spec replay"
    for response in answers:
        assert secret not in response.text
    shown = answers[2].json()["spec"]
    assert shown["env"] == {"WANDB_API_KEY": "***", "PLAIN": "visible"}
    assert shown["secret_env"] == ["WANDB_API_KEY"]

    # The key's hash saw the real value: another secret under the same key is another spec.
    changed = {**spec, "env": {**spec["env"], "WANDB_API_KEY": "another"}}
    reused = send(api, "POST", "/v1/jobs", user, json=changed, headers=key)
    assert_error_body(reused, 409, "idempotency_key_reused")

    # Stored as given, and the worker hands the real value to the ranks.
    raw = stored_spec(settings, job_id)
    assert raw["env"]["WANDB_API_KEY"] == secret
    env = build_env(
        parse_spec(raw),
        job_id=job_id,
        attempt=1,
        paths=RunPaths.for_attempt(settings.data_dir, job_id, 1),
        resume_from=None,
        cuda_available=False,
        base_env={},
    )
    assert env["WANDB_API_KEY"] == secret


def test_secret_env_must_name_variables_of_env(api: TestClient, user: str) -> None:
    spec = {**SYNTHETIC, "env": {"A": "1"}, "secret_env": ["A", "B"]}
    error = assert_error_body(send(api, "POST", "/v1/jobs", user, json=spec), 422)
    assert error["detail"][0]["loc"] == ["body", "secret_env"] and "B" in error["message"]


def test_policy_settings_read_comma_separated_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHBAY_ALLOWED_QUEUES", "gpu1, gpu4,")
    monkeypatch.setenv("LAUNCHBAY_FORBIDDEN_ENV", "SECRET_*,OTHER")
    monkeypatch.setenv("LAUNCHBAY_SUBMISSIONS_PER_MINUTE", "0")
    loaded = Settings()
    assert loaded.allowed_queues == ["gpu1", "gpu4"]
    assert loaded.submissions_per_minute == 0
    names = ["SECRET_KEY", "secret_x", "OTHER", "OTHERS", "LD_PRELOAD"]
    assert policy.forbidden_env_names(names, loaded.forbidden_env) == [
        "OTHER",
        "SECRET_KEY",
        "secret_x",
    ]
    monkeypatch.delenv("LAUNCHBAY_FORBIDDEN_ENV")
    assert policy.forbidden_env_names(names, Settings().forbidden_env) == ["LD_PRELOAD"]


def test_an_owner_over_the_disk_quota_is_refused_and_nothing_is_stored(
    api: TestClient, settings: Settings, user: str
) -> None:
    api.app.state.settings = settings.model_copy(update={"owner_disk_quota_bytes": 10_000})  # type: ignore[attr-defined]
    first = send(api, "POST", "/v1/jobs", user, json=SYNTHETIC)
    assert first.status_code == 201
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:  # what the worker records when the attempt ends
            job = session.get(Job, first.json()["id"])
            assert job is not None
            job.disk_bytes = 10_000
            session.add(job)
            session.commit()
    finally:
        engine.dispose()
    before = count_jobs(settings)
    error = assert_error_body(send(api, "POST", "/v1/jobs", user, json=SYNTHETIC), 403)
    assert error["code"] == "disk_quota_exceeded"
    assert error["detail"] == {"used_bytes": 10_000, "quota_bytes": 10_000}
    assert count_jobs(settings) == before
    assert send(api, "POST", "/v1/jobs", ADMIN_TOKEN, json=SYNTHETIC).status_code == 201
