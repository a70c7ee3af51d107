"""The CLI's operations commands against a fake API: logs --grep, webhook, stacks."""

import json
from typing import Any

from tests.unit.client.conftest import FakeApi, job, reply
from tests.unit.client.test_client_cli import _quiet_env, launchbay

__all__ = ["_quiet_env"]


def test_logs_grep_pages_through_the_servers_matches(api: FakeApi) -> None:
    def page(*seqs: int) -> Any:
        items = [{"seq": s, "rank": 0, "node": 0, "ts": 0.0, "line": f"loss {s}"} for s in seqs]
        return reply(200, {"items": items, "next_after": seqs[-1] if seqs else 0})

    api.on("GET", "/v1/jobs/j1/logs", page(3, 9), page())
    result = launchbay(api, "logs", "j1", "--grep", r"loss \d", "--regex")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["[rank 0] loss 3", "[rank 0] loss 9"]
    sent = api.sent("GET", "/v1/jobs/j1/logs")
    assert [dict(r.url.params) for r in sent] == [
        {"q": r"loss \d", "regex": "true", "after": "0", "limit": "1000"},
        {"q": r"loss \d", "regex": "true", "after": "9", "limit": "1000"},
    ]


def test_webhook_add_sends_the_events_and_prints_the_secret_once(api: FakeApi) -> None:
    created = {
        "id": "w1",
        "url": "https://h.example/x",
        "events": ["terminal", "best"],
        "format": "slack",
        "all_jobs": False,
        "owner": "ann",
        "created_at": "2026-01-01T00:00:00Z",
        "secret": "s3cret",
    }
    api.on("POST", "/v1/webhooks", reply(201, created))
    result = launchbay(
        api, "webhook", "add", created["url"], "-e", "terminal", "-e", "best", "--format", "slack"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "s3cret"
    body = json.loads(api.sent("POST", "/v1/webhooks")[0].content)
    assert body == {
        "url": created["url"],
        "events": ["terminal", "best"],
        "format": "slack",
        "all_jobs": False,
    }


def test_stacks_asks_then_prints_the_new_capture(api: FakeApi) -> None:
    def capture(ts: float, reason: str) -> dict[str, Any]:
        items = [
            {
                "rank": r,
                "node": 0,
                "ts": ts,
                "reason": reason,
                "stack": f"frame of rank {r}",
                "attempt": 1,
                "in_collective": r == 0,
                "last_output_ts": None,
            }
            for r in (0, 1)
        ]
        summary = {
            "ts": ts,
            "reason": reason,
            "attempt": 1,
            "in_collective": [0],
            "elsewhere": [1],
            "behind": [1],
            "note": "rank(s) 0 wait",
        }
        return {"items": items, "summary": summary}

    api.on(
        "GET",
        "/v1/jobs/j1/stacks",
        reply(200, capture(1.0, "hang")),
        reply(200, capture(1.0, "hang")),
        reply(200, capture(2.0, "request")),
    )
    api.on("GET", "/v1/jobs/j1", reply(200, job()))
    api.on("POST", "/v1/jobs/j1/stacks", reply(202, {"job_id": "j1", "requested_at": "x"}))
    result = launchbay(api, "stacks", "j1", "--timeout", "5")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "# request: rank(s) 0 wait"
    assert "== rank 0 (node 0, attempt 1): in a collective" in lines
    assert "== rank 1 (node 0, attempt 1): not in a collective" in lines
    assert len(api.sent("POST", "/v1/jobs/j1/stacks")) == 1
