"""`launchbay token create|list|revoke` and the SDK's token calls against a real API."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from client import Forbidden, Unauthorized
from tests.integration.client.conftest import ADMIN_TOKEN, LiveApi
from tests.integration.client.test_client_cli_live import SPEC, launchbay


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LAUNCHBAY_API_URL", "LAUNCHBAY_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def test_the_cli_creates_lists_and_revokes_tokens(live_api: LiveApi) -> None:
    created = launchbay(live_api.url, "token", "create", "--name", "alice")
    assert created.exit_code == 0, created.output
    token = created.stdout.strip()
    assert token.startswith("lb_") and len(token) == 46
    assert "shown only this once" in created.stderr

    as_admin = launchbay(live_api.url, "token", "create", "--name", "ops", "--role", "admin")
    assert as_admin.exit_code == 0

    listed = json.loads(launchbay(live_api.url, "token", "list", "--json").stdout)
    assert [(t["name"], t["role"], t["active"]) for t in listed["items"]] == [
        ("alice", "user", True),
        ("ops", "admin", True),
    ]
    table = launchbay(live_api.url, "token", "list").stdout
    assert "alice" in table and token not in table

    with live_api.client(token=token) as lb:
        job_id = lb.submit_job(SPEC).id
        with pytest.raises(Forbidden):
            lb.list_tokens()
    forbidden = launchbay(live_api.url, "token", "list", token=token)
    assert forbidden.exit_code == 1 and "admin role" in forbidden.stderr

    taken = launchbay(live_api.url, "token", "create", "--name", "alice")
    assert taken.exit_code == 1 and "token_name_taken" in taken.stderr

    revoked = launchbay(live_api.url, "token", "revoke", "alice")
    assert revoked.exit_code == 0 and "revoked token alice" in revoked.stdout
    refused = launchbay(live_api.url, "status", job_id, token=token)
    assert refused.exit_code == 1
    assert "revoked" in refused.stderr and token not in refused.stderr
    still = launchbay(live_api.url, "status", job_id, "--json")
    assert json.loads(still.stdout)["id"] == job_id, "an admin still sees the job"


def test_the_sdk_sends_an_expiry_and_a_revoked_token_is_refused(live_api: LiveApi) -> None:
    with live_api.client() as admin:
        later = datetime.now(UTC) + timedelta(days=1)
        created = admin.create_token("ci", expires_at=later)
        listed = {t.name: t for t in admin.list_tokens()}
        expires_at = listed["ci"].expires_at
        assert expires_at is not None
        assert abs((expires_at - later).total_seconds()) < 1
        with live_api.client(token=created.token) as ci:
            assert ci.list_jobs().total == 0
        admin.revoke_token("ci")
        with live_api.client(token=created.token) as ci, pytest.raises(Unauthorized):
            ci.list_jobs()
    with live_api.client(token=ADMIN_TOKEN + "x") as wrong, pytest.raises(Unauthorized):
        wrong.list_jobs()
