"""Rate limits: a token bucket per key or user (429 + Retry-After), the login throttle."""

from __future__ import annotations

from pathlib import Path

from app.auth.ratelimit import LoginThrottle, TokenBuckets
from tests.conftest import add_key, fake_settings, signed_in


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_a_burst_then_the_rate() -> None:
    clock = Clock()
    buckets = TokenBuckets(rate_per_minute=60, burst=3, clock=clock)
    assert [buckets.take("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("k") == 1.0  # one token a second
    assert buckets.take("other") == 0.0  # buckets are per key
    clock.now += 1.0
    assert buckets.take("k") == 0.0 and buckets.take("k") > 0
    assert TokenBuckets(rate_per_minute=0, burst=1).take("k") == 0.0  # 0 = no limit


def test_login_throttle_window_and_delay() -> None:
    clock = Clock()
    throttle = LoginThrottle(per_user=2, per_address=3, window_s=60, clock=clock)
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


def test_parallel_attempts_are_counted_before_their_passwords_are_checked() -> None:
    clock = Clock()
    throttle = LoginThrottle(per_user=3, per_address=10, window_s=60, clock=clock)
    # all begun before any answer: only the first three are heard
    assert [throttle.begin("ann", "1.2.3.4") for _ in range(5)] == [0, 0, 0, 60, 60]
    clock.now += 61
    assert throttle.begin("ann", "1.2.3.4") == 0
    throttle.succeeded("ann", "1.2.3.4")  # a success is not a failure, for the address too
    assert throttle.retry_after("ann", "1.2.3.4") == 0
    clock.now += 61
    throttle.retry_after("x", "y")
    assert not throttle._failures  # nothing kept for names and addresses gone quiet
