"""Rate limits: a token bucket per key or user (429 + Retry-After), the login throttle.

The limiters are those of the store under test: in memory on SQLite, in the database on
PostgreSQL (``RAGDESK_TEST_STORE=postgresql``: app/auth/shared_limits.py); they must
behave alike. Several fronts sharing one budget: tests/test_shared_limits.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.auth.ratelimit import LoginLimiter, LoginThrottle, RequestLimiter, TokenBuckets
from tests.conftest import add_key, fake_settings, signed_in
from tests.pg_kit import store_under_test


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class InMemory:
    """The limiters SQLite's single process uses."""

    def buckets(self, rate_per_minute: float, burst: int, clock: Clock) -> RequestLimiter:
        return TokenBuckets(rate_per_minute, burst, clock)

    def throttle(self, *, per_user: int, per_address: int, clock: Clock) -> LoginLimiter:
        return LoginThrottle(per_user=per_user, per_address=per_address, window_s=60, clock=clock)

    def remembered(self, throttle: LoginLimiter) -> int:
        assert isinstance(throttle, LoginThrottle)
        return len(throttle._failures)


class InDatabase:
    """The limiters every front on one PostgreSQL shares."""

    def __init__(self, db: Any):
        self.db = db

    def buckets(self, rate_per_minute: float, burst: int, clock: Clock) -> RequestLimiter:
        from app.auth.shared_limits import SharedTokenBuckets

        return SharedTokenBuckets(self.db, "requests", rate_per_minute, burst, clock)

    def throttle(self, *, per_user: int, per_address: int, clock: Clock) -> LoginLimiter:
        from app.auth.shared_limits import SharedLoginThrottle

        return SharedLoginThrottle(
            self.db, per_user=per_user, per_address=per_address, window_s=60, clock=clock
        )

    def remembered(self, throttle: LoginLimiter) -> int:
        return int(self.db.read().execute("SELECT COUNT(*) FROM rate_failures").fetchone()[0])


@pytest.fixture
def limits(request: pytest.FixtureRequest) -> Iterator[InMemory | InDatabase]:
    if store_under_test() != "postgresql":
        yield InMemory()
        return
    from retrieval.pg import PostgresDatabase

    db = PostgresDatabase(request.getfixturevalue("_store_under_test"))
    try:
        yield InDatabase(db)
    finally:
        db.close()


def test_bucket_allows_a_burst_then_the_rate(limits: InMemory | InDatabase) -> None:
    clock = Clock()
    buckets = limits.buckets(rate_per_minute=60, burst=3, clock=clock)
    assert [buckets.take("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("k") == 1.0  # one token a second
    assert buckets.take("other") == 0.0  # buckets are per key
    clock.now += 1.0
    assert buckets.take("k") == 0.0 and buckets.take("k") > 0
    assert limits.buckets(rate_per_minute=0, burst=1, clock=clock).take("k") == 0.0  # no limit


def test_login_throttle_window_and_delay(limits: InMemory | InDatabase) -> None:
    clock = Clock()
    throttle = limits.throttle(per_user=2, per_address=3, clock=clock)
    assert throttle.retry_after("ann", "1.2.3.4") == 0 and throttle.delay("ann", "x") == 0
    throttle.failed("ann", "1.2.3.4")
    throttle.failed("ANN", "5.6.7.8")  # names are case-insensitive, as accounts are
    assert throttle.retry_after("ann", "9.9.9.9") == 60
    assert throttle.delay("ann", "9.9.9.9") == 0.5
    throttle.failed("bob", "1.2.3.4")
    throttle.failed("carl", "1.2.3.4")
    assert throttle.retry_after("dora", "1.2.3.4") == 60  # the address is spent too
    clock.now += 61
    assert throttle.retry_after("ann", "1.2.3.4") == 0


def test_requests_past_the_rate_get_429_with_retry_after(tmp_path: Path) -> None:
    settings = fake_settings(tmp_path, rate_limit_per_minute=6, rate_limit_burst=2)
    with signed_in(settings) as client:
        key = add_key(client)
        client.cookies.clear()
        headers = {"Authorization": f"Bearer {key}"}
        statuses = [client.get("/api/documents", headers=headers).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        refused = client.get("/api/documents", headers=headers)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        v1 = client.get("/v1/models", headers=headers)
        assert v1.status_code == 429 and v1.json()["error"]["type"] == "rate_limit_error"
        assert int(v1.headers["retry-after"]) >= 1
        other = {"Authorization": f"Bearer {add_key(client)}"}  # another key, its own bucket
        assert client.get("/api/documents", headers=other).status_code == 200
        assert client.get("/health/live").status_code == 200  # public routes are not limited


def test_parallel_attempts_are_counted_before_their_passwords_are_checked(
    limits: InMemory | InDatabase,
) -> None:
    clock = Clock()
    throttle = limits.throttle(per_user=3, per_address=10, clock=clock)
    # all begun before any answer: only the first three are heard
    assert [throttle.begin("ann", "1.2.3.4") for _ in range(5)] == [0, 0, 0, 60, 60]
    clock.now += 61
    assert throttle.begin("ann", "1.2.3.4") == 0
    throttle.succeeded("ann", "1.2.3.4")  # a success is not a failure, for the address too
    assert throttle.retry_after("ann", "1.2.3.4") == 0
    clock.now += 61
    throttle.retry_after("x", "y")
    assert limits.remembered(throttle) == 0  # nothing kept for names and addresses gone quiet
