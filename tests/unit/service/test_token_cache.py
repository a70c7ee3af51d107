"""The in-process cache of verified tokens: how long it trusts one, and what ends that."""

from datetime import UTC, datetime, timedelta

import pytest

from service import auth
from service.auth import Principal, TokenCache

ALICE = Principal(name="alice", role="user")


class Clock:
    """Stands in for `time` in service.auth: a wall clock and a monotonic one."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(auth, "time", fake)
    return fake


def test_a_token_is_trusted_for_the_ttl_only(clock: Clock) -> None:
    cache = TokenCache(ttl_s=2.0, max_entries=10)
    cache.put("d1", ALICE, None)
    assert cache.get("d1") == ALICE
    clock.now += 1.9
    assert cache.get("d1") == ALICE
    clock.now += 0.2
    assert cache.get("d1") is None
    assert cache.get("unknown") is None


def test_the_tokens_own_expiry_ends_trust_before_the_ttl(clock: Clock) -> None:
    cache = TokenCache(ttl_s=60.0, max_entries=10)
    expires = datetime.fromtimestamp(clock.now + 1.0, UTC)
    cache.put("aware", ALICE, expires)
    cache.put("naive", ALICE, expires.replace(tzinfo=None))  # as SQLite hands it back
    assert cache.get("aware") == ALICE and cache.get("naive") == ALICE
    clock.now += 1.0
    assert cache.get("aware") is None and cache.get("naive") is None


def test_forgetting_a_name_drops_all_its_tokens_at_once(clock: Clock) -> None:
    cache = TokenCache(ttl_s=60.0, max_entries=10)
    bob = Principal(name="bob", role="admin")
    cache.put("a1", ALICE, None)
    cache.put("a2", ALICE, datetime.now(UTC) + timedelta(days=1))
    cache.put("b1", bob, None)
    cache.forget("alice")
    assert cache.get("a1") is None and cache.get("a2") is None
    assert cache.get("b1") == bob


def test_the_oldest_entry_makes_room(clock: Clock) -> None:
    cache = TokenCache(ttl_s=60.0, max_entries=2)
    for digest in ("first", "second", "third"):
        cache.put(digest, ALICE, None)
    assert cache.get("first") is None
    assert cache.get("second") == ALICE and cache.get("third") == ALICE
