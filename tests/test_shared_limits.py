"""Rate limits kept in PostgreSQL (app/auth/shared_limits.py): several fronts on one
database share one budget — a burst of B spread over two fronts allows B in all, not 2B
— sign-in failures are counted across them, and threads on both at once never get more
than the budget. The database failing lets requests through, but not sign-ins.

Each front here is a ``PostgresDatabase`` of its own (its own pool) on one database of
the test PostgreSQL (``pg_server``), whichever store the rest of the suite runs on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import pytest
from litestar.testing import TestClient

from app.auth import shared_limits
from app.auth.shared_limits import (
    PRUNE_EVERY_S,
    SharedKeyFailures,
    SharedLoginThrottle,
    SharedTokenBuckets,
)
from app.factory import create_app
from app.migrations import migrate_all
from retrieval.db import Database
from retrieval.pg import PostgresDatabase, StoreUnavailable
from retrieval.sql import Dialect, Session
from tests.conftest import TEST_PASSWORD, add_key, add_user, fake_settings, signed_in


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def url(pg_server: Any) -> Iterator[str]:
    url = pg_server.fresh_database()
    try:
        yield url
    finally:
        pg_server.drop(url)


@pytest.fixture
def fronts(url: str) -> Iterator[tuple[PostgresDatabase, PostgresDatabase]]:
    """Two fronts' connections to one database."""
    a, b = PostgresDatabase(url), PostgresDatabase(url)
    migrate_all(a)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def rows(db: Database, table: str) -> int:
    return int(db.read().execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def in_threads(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run every call at once (as far as threads go), each in its own thread."""
    results: list[Any] = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(i: int) -> None:
        start.wait()
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def test_two_fronts_share_one_burst_and_one_rate(
    fronts: tuple[PostgresDatabase, PostgresDatabase],
) -> None:
    clock = Clock()
    a, b = (SharedTokenBuckets(db, "requests", 60, 4, clock) for db in fronts)
    taken = [(a if i % 2 else b).take("key:1") for i in range(8)]
    assert taken == [0.0] * 4 + [1.0] * 4  # 4 in all, not 4 each
    assert a.take("key:2") == 0.0  # buckets are per key
    clock.now += 1.0  # one token a second, for both
    assert b.take("key:1") == 0.0 and a.take("key:1") == 1.0
    clock.now += 0.5
    assert b.take("key:1") == pytest.approx(0.5)
    sso = SharedTokenBuckets(fronts[0], "sso_starts", 60, 1, clock)
    assert sso.take("key:1") == 0.0  # each limiter has a scope of its own


def test_a_front_whose_clock_is_behind_refills_nothing(
    fronts: tuple[PostgresDatabase, PostgresDatabase],
) -> None:
    ahead, behind = Clock(1000.0), Clock(990.0)
    a = SharedTokenBuckets(fronts[0], "requests", 60, 2, ahead)
    b = SharedTokenBuckets(fronts[1], "requests", 60, 2, behind)
    assert [a.take("k"), a.take("k")] == [0.0, 0.0]
    assert b.take("k") == 1.0  # not ten seconds' worth of tokens, nor a negative wait
    behind.now += 5.0  # still behind the bucket's time
    assert b.take("k") == 1.0
    ahead.now += 1.0
    assert a.take("k") == 0.0 and b.take("k") == 1.0


def test_threads_on_two_fronts_never_get_more_than_the_burst(
    fronts: tuple[PostgresDatabase, PostgresDatabase],
) -> None:
    # a rate so slow that no token flows in while the test runs: exactly the burst is granted
    a, b = (SharedTokenBuckets(db, "requests", 0.001, 25, time.time) for db in fronts)

    def five(front: SharedTokenBuckets) -> list[float]:
        return [front.take("busy") for _ in range(5)]

    calls = [partial(five, front) for front in [a, b] * 8]
    taken = [t for result in in_threads(calls) for t in result]
    assert len(taken) == 80 and taken.count(0.0) == 25
    assert all(t > 0 for t in taken if t != 0.0)


def test_full_buckets_are_pruned(fronts: tuple[PostgresDatabase, PostgresDatabase]) -> None:
    clock = Clock()
    buckets = SharedTokenBuckets(fronts[0], "requests", 60, 3, clock)
    buckets.take("quiet")  # the first take prunes (nothing yet); the next, a minute on
    clock.now += PRUNE_EVERY_S - 2
    buckets.take("busy")
    assert rows(fronts[0], "rate_buckets") == 2
    clock.now += 2  # "quiet" has been full for a while (3 tokens in 3 s); "busy" has not
    buckets.take("other")
    keys = {r[0] for r in fronts[0].read().execute("SELECT key FROM rate_buckets")}
    assert keys == {"busy", "other"}


def test_sign_in_failures_count_on_every_front(
    fronts: tuple[PostgresDatabase, PostgresDatabase],
) -> None:
    clock = Clock()
    a, b = (
        SharedLoginThrottle(db, per_user=3, per_address=4, window_s=60, clock=clock)
        for db in fronts
    )
    # attempts begun on both fronts before any answer: three are heard, in all
    assert [(a if i % 2 else b).begin("ann", "1.2.3.4") for i in range(5)] == [0, 0, 0, 60, 60]
    assert a.retry_after("ANN", "5.6.7.8") == 60 and b.delay("ann", "5.6.7.8") == 1.0
    b.succeeded("ann", "1.2.3.4")  # forgiven on every front; one attempt is not a failure
    assert a.retry_after("ann", "9.9.9.9") == 0
    assert a.begin("bob", "1.2.3.4") == 0  # the address has 2 + 1 failures now
    b.failed("carl", "1.2.3.4")
    assert b.begin("dora", "1.2.3.4") == 60  # the address is spent, on both
    assert a.retry_after("dora", "1.2.3.4") == 60
    clock.now += 61
    assert a.begin("dora", "1.2.3.4") == 0


def test_parallel_sign_ins_on_two_fronts_are_checked_and_counted_atomically(
    fronts: tuple[PostgresDatabase, PostgresDatabase],
) -> None:
    a, b = (SharedLoginThrottle(db, per_user=4, per_address=100, window_s=600) for db in fronts)
    calls = [partial(front.begin, "ann", f"10.0.0.{i}") for i, front in enumerate([a, b] * 10)]
    assert in_threads(calls).count(0) == 4


def test_wrong_keys_count_on_every_front(
    fronts: tuple[PostgresDatabase, PostgresDatabase],
) -> None:
    clock = Clock()
    a, b = (SharedKeyFailures(db, 3, 60, clock) for db in fronts)
    a.failed("1.2.3.4")
    b.failed("1.2.3.4")
    assert a.retry_after("1.2.3.4") == 0
    clock.now += 10
    a.failed("1.2.3.4")
    assert b.retry_after("1.2.3.4") == 50 and a.retry_after("1.2.3.4") == 50
    assert b.retry_after("5.6.7.8") == 0  # per address
    clock.now += 51  # the first two have left the window
    assert a.retry_after("1.2.3.4") == 0


def test_expired_failures_are_pruned(fronts: tuple[PostgresDatabase, PostgresDatabase]) -> None:
    clock = Clock()
    keys = SharedKeyFailures(fronts[0], 3, 60, clock)
    logins = SharedLoginThrottle(fronts[1], per_user=3, per_address=3, window_s=60, clock=clock)
    keys.failed("1.2.3.4")
    logins.failed("ann", "1.2.3.4")
    assert rows(fronts[0], "rate_failures") == 3
    keys.retry_after("1.2.3.4")  # the first prune: nothing has expired
    clock.now += PRUNE_EVERY_S + 1
    logins.failed("bob", "5.6.7.8")
    keys.retry_after("1.2.3.4")  # prunes every scope's expired rows
    assert rows(fronts[0], "rate_failures") == 2  # bob's, new


class Unreachable(Database):
    """A database that fails every statement, as PostgreSQL out of reach does."""

    dialect: Dialect = "postgresql"

    def _fail(self) -> NoReturn:
        raise StoreUnavailable("cannot reach the database at postgresql://…")

    def write(self) -> AbstractContextManager[Session]:
        self._fail()

    def read(self) -> Session:
        self._fail()

    def migrate(self, migrations: Any) -> None:
        self._fail()

    def close(self) -> None:
        pass

    def held(self, name: str, key: int) -> AbstractContextManager[bool]:
        self._fail()


def test_the_database_failing_lets_requests_through_but_not_sign_ins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    warned: list[str] = []
    monkeypatch.setattr(shared_limits.log, "warning", lambda text, *args: warned.append(text))
    down = Unreachable()
    buckets = SharedTokenBuckets(down, "requests", 60, 1)
    assert [buckets.take("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    keys = SharedKeyFailures(down, 1, 60)
    keys.failed("1.2.3.4")
    assert keys.retry_after("1.2.3.4") == 0
    assert len(warned) == 2  # once per limiter, not once per request
    assert all("not counted while the database fails" in text for text in warned)
    logins = SharedLoginThrottle(down, per_user=3, per_address=3, window_s=60)
    for attempt in (
        lambda: logins.begin("ann", "1.2.3.4"),
        lambda: logins.retry_after("ann", "1.2.3.4"),
        lambda: logins.failed("ann", "1.2.3.4"),
        lambda: logins.succeeded("ann", "1.2.3.4"),
    ):
        with pytest.raises(StoreUnavailable):
            attempt()


def test_a_missing_table_refuses_sign_ins_with_store_unavailable(pg_server: Any) -> None:
    url = pg_server.empty_database()  # no schema at all: an error of SQL, not of reach
    db = PostgresDatabase(url)
    try:
        assert SharedTokenBuckets(db, "requests", 60, 1).take("k") == 0.0
        with pytest.raises(StoreUnavailable):
            SharedLoginThrottle(db, per_user=3, per_address=3, window_s=60).begin("a", "b")
    finally:
        db.close()
        pg_server.drop(url)


def test_two_apps_on_one_postgresql_share_the_limits(tmp_path: Path, url: str) -> None:
    limits = {
        "database_url": url,
        "rate_limit_per_minute": 1,  # no token flows in while the test runs
        "rate_limit_burst": 3,
        "login_max_failures_per_user": 2,
    }
    with (
        signed_in(fake_settings(tmp_path / "a", **limits)) as a,
        TestClient(create_app(fake_settings(tmp_path / "b", **limits))) as b,
    ):
        b.app.state.services.wait_until_loaded(30)
        for client in (a, b):
            auth = client.app.state.services.auth
            assert isinstance(auth.buckets, SharedTokenBuckets)
            assert isinstance(auth.sso_starts, SharedTokenBuckets)
            assert isinstance(auth.logins, SharedLoginThrottle)
            assert isinstance(auth.key_failures, SharedKeyFailures)
        headers = {"Authorization": f"Bearer {add_key(a)}"}
        a.cookies.clear()
        statuses = [
            (a, b)[i % 2].get("/api/documents", headers=headers).status_code for i in range(5)
        ]
        assert statuses == [200, 200, 200, 429, 429]  # a burst of 3 through both, not 6
        refused = b.get("/v1/models", headers=headers)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1

        add_user(a, "ann")
        for client in (a, b):  # one wrong password through each front
            wrong = client.post("/login", data={"name": "ann", "password": "guess"})
            assert wrong.status_code == 401
        locked = a.post("/login", data={"name": "ann", "password": TEST_PASSWORD})
        assert locked.status_code == 429 and int(locked.headers["retry-after"]) > 0
