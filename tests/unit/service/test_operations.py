"""The pure parts of webhooks, the audit log, log search and stack summaries."""

import hashlib
import hmac
import ipaddress

import pytest

from service.audit import audit_kind, outcome_of
from service.models import RankStack
from service.records.log_search import BadPattern, check_query, escape_like
from service.stack_summary import summarize
from service.webhook_addresses import ForbiddenAddress, forbidden_reason, resolve_target
from service.webhook_delivery import retry_delay_s, sign


def test_the_signature_is_hmac_sha256_of_the_timestamp_and_the_raw_body() -> None:
    body = b'{"id":"d1"}'
    header = sign("secret", 1700000000, body)
    expected = hmac.new(b"secret", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"
    assert sign("other", 1700000000, body) != header


def test_retries_back_off_exponentially_up_to_an_hour() -> None:
    assert [retry_delay_s(n, 10) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert retry_delay_s(30, 10) == 3600


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.2", "loopback"),
        ("10.0.0.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.1.1", "shared"),
        ("::ffff:10.0.0.1", "private"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
    ],
)
def test_internal_addresses_are_forbidden(address: str, why: str) -> None:
    reason = forbidden_reason(ipaddress.ip_address(address))
    assert reason is not None and why in reason


def test_public_addresses_are_allowed_and_the_opt_in_allows_private_ones() -> None:
    assert forbidden_reason(ipaddress.ip_address("93.184.215.14")) is None
    assert forbidden_reason(ipaddress.ip_address("2606:4700::1111")) is None
    target = resolve_target("https://93.184.215.14:8443/x", allow_private=False)
    assert (target.scheme, target.host, target.port, target.address) == (
        "https",
        "93.184.215.14",
        8443,
        "93.184.215.14",
    )
    assert resolve_target("http://127.0.0.1/x", allow_private=True).address == "127.0.0.1"
    for url in ("ftp://93.184.215.14/", "http://u:p@93.184.215.14/", "http://[::1/"):
        with pytest.raises(ForbiddenAddress):
            resolve_target(url, allow_private=True)


def test_audit_kinds_name_the_routes() -> None:
    assert audit_kind("POST", "/v1/jobs") == "job.submit"
    assert audit_kind("DELETE", "/v1/tokens/{name}") == "token.revoke"
    assert audit_kind("PUT", "/v1/policy") == "policy.update"
    assert audit_kind("POST", "/v1/jobs/{job_id}/retry") == "job.retry"
    assert audit_kind("DELETE", None) == "unknown"
    assert [outcome_of(s) for s in (201, 404, 503)] == ["ok", "refused", "error"]


def test_a_search_text_is_checked_before_any_query() -> None:
    for text, regex in (("", False), ("x" * 257, False), ("a\x00b", False), (r"(\d)\1", True)):
        with pytest.raises(BadPattern):
            check_query(text, regex)
    # A substring is never compiled: "([" is plain text.
    assert not check_query("([", False).regex and check_query(r"loss=\d+", True).regex
    assert escape_like(r"50%_a\b") == r"50\%\_a\\b"


def stack_row(rank: int, in_collective: bool, last: float | None, ts: float = 10.0) -> RankStack:
    return RankStack(
        job_id="j",
        attempt=1,
        rank=rank,
        ts=ts,
        reason="hang",
        stack="",
        in_collective=in_collective,
        last_output_ts=last,
    )


def test_the_summary_names_the_ranks_the_others_wait_for() -> None:
    summary = summarize([stack_row(0, True, 5), stack_row(1, False, 5), stack_row(2, True, 5)])
    assert summary is not None
    assert (summary.in_collective, summary.elsewhere, summary.behind) == ([0, 2], [1], [1])
    quiet = summarize([stack_row(0, False, 100.0), stack_row(1, False, 80.0)])
    assert quiet is not None and quiet.behind == [1]
    older = stack_row(0, False, None, ts=1.0)
    latest = summarize([older, stack_row(0, True, None), stack_row(1, True, None)])
    assert latest is not None and latest.in_collective == [0, 1] and latest.behind == []
    assert summarize([]) is None
