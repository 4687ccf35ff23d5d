"""PostgreSQL out of reach: requests get 503 with ``Retry-After`` (never a 500), readiness
says 503 and why, ``ragdesk_database_up`` drops to 0, and the URL's password appears in
no answer, log line or metric (app/errors.py, app/ops/database_watch.py).

These run on either store setting: each test takes a database of its own on the test
PostgreSQL (``pg_server``) and takes it away mid-test."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from litestar.testing import TestClient

from app.factory import create_app
from app.ops.database_watch import DatabaseWatch
from retrieval.db import SqliteDatabase
from tests.conftest import add_key, add_user, fake_settings, login, logs_captured, wait_for
from tests.server import REPO

SECRET = "pw-Zq81xkV3"  # the URL's password: never to be seen anywhere


class Outage:
    """A database of the test server's own, reached with a password in its URL, that
    can be taken away (no connections allowed, those open ended) and given back."""

    def __init__(self, server: Any):
        self.server = server
        plain = server.fresh_database()
        self.name = urlsplit(plain).path.lstrip("/")
        parts = urlsplit(plain)  # trust authentication: any password is accepted
        self.url = urlunsplit(parts._replace(netloc=f"postgres:{SECRET}@{parts.hostname or ''}"))
        self._plain = plain

    def _admin(self, sql: str, *params: Any) -> None:
        import psycopg

        with psycopg.connect(self.server.uri, autocommit=True) as admin:
            admin.execute(sql, params or None)

    def cut(self) -> None:
        self._admin(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false')
        self._admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            self.name,
        )

    def mend(self) -> None:
        self._admin(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true')

    def drop(self) -> None:
        self.mend()
        self.server.drop(self._plain)


@pytest.fixture
def outage(pg_server: Any) -> Iterator[Outage]:
    own = Outage(pg_server)
    try:
        yield own
    finally:
        own.drop()


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """``caplog`` at DEBUG, also once the app has replaced the root logger's handlers
    (Litestar's logging config, at start): held by the loggers themselves."""
    with logs_captured(caplog, "app", "retrieval", "litestar", "psycopg", "psycopg_pool"):
        yield caplog


def no_secret(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text


def test_requests_get_503_and_readiness_says_why_while_the_database_is_away(
    outage: Outage, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    settings = fake_settings(tmp_path / "data", database_url=outage.url)
    with TestClient(create_app(settings)) as client:
        services = client.app.state.services
        assert services.wait_until_loaded(60)
        add_user(client, "root", "admin")
        key = {"Authorization": f"Bearer {add_key(client, 'root')}"}
        login(client, "root")
        assert client.get("/health/ready").status_code == 200
        up = client.get("/metrics", headers=key).text
        assert "ragdesk_database_up 1.0" in up

        outage.cut()
        api = client.get("/api/documents", headers=key)
        assert api.status_code == 503 and api.headers["retry-after"] == "5"
        assert api.json()["error"]["title"] == "Unavailable"
        assert "database" in api.json()["error"]["detail"]
        v1 = client.get("/v1/models", headers=key)
        assert v1.status_code == 503 and v1.headers["retry-after"] == "5"
        assert v1.json()["error"]["type"] == "server_error"
        page = client.get("/")  # the session's cookie is looked up in the database
        assert page.status_code == 503 and page.headers["retry-after"] == "5"
        assert "try again shortly" in page.text and "<html" in page.text.lower()

        client.cookies.clear()
        client.headers.pop("X-CSRF-Token", None)
        ready = client.get("/health/ready")
        assert ready.status_code == 503 and ready.headers["retry-after"] == "5"
        assert ready.json()["detail"] == "the database cannot be reached"
        reason = services.problem  # what an admin's readiness says: the URL, blanked
        assert "the database at postgresql://postgres:***@" in reason
        metrics = services.metrics.render().decode()
        assert "ragdesk_database_up 0.0" in metrics
        no_secret(api.text, v1.text, page.text, ready.text, reason, metrics)

        outage.mend()  # back: readiness finds it again by itself
        wait_for(lambda: client.get("/health/ready").status_code == 200, timeout=60)
        assert client.get("/api/documents", headers=key).status_code == 200
        assert "ragdesk_database_up 1.0" in client.get("/metrics", headers=key).text
    assert "the database cannot be used" in logged.text  # told once, when it went
    assert "psycopg" in logged.text  # the driver's own lines were heard too
    no_secret(logged.text, *(record.getMessage() for record in logged.records))


def test_readiness_never_waits_long_on_a_database_that_does_not_answer() -> None:
    """A check hung on the network: readiness answers within ``wait_s`` with what it last
    knew, then reports the database unreachable once the check is ``slow_s`` late."""
    release = threading.Event()
    watch = DatabaseWatch(lambda: release.wait(30), "the database at x", wait_s=0.05, slow_s=0.3)
    start = time.monotonic()
    assert watch.problem() is None  # nothing known yet
    assert time.monotonic() - start < 1.0
    time.sleep(0.4)
    assert watch.problem() == "the database at x did not answer within 0.3 s"
    release.set()
    wait_for(lambda: watch.problem() is None)


def test_a_check_stands_for_every_s_and_a_failed_request_is_told_at_once() -> None:
    pings: list[float] = []
    down = threading.Event()

    def ping() -> None:
        pings.append(time.monotonic())
        if down.is_set():
            raise RuntimeError(f"cannot reach postgresql://u:{SECRET}@db/x")

    def blank(text: str) -> str:
        return text.replace(SECRET, "***")

    watch = DatabaseWatch(ping, "the database at db", blank=blank, every_s=0.5)
    assert watch.problem() is None and watch.problem() is None
    assert len(pings) == 1  # the second asked within every_s: the first check stands
    watch.failed(f"cannot reach postgresql://u:{SECRET}@db/x")  # a request met the outage
    assert watch.problem() == "cannot reach postgresql://u:***@db/x"
    time.sleep(0.6)
    assert watch.problem() is None  # the next check found it back
    down.set()
    time.sleep(0.6)
    assert watch.problem() == "cannot reach postgresql://u:***@db/x"


def test_sqlite_has_nothing_to_watch_and_never_loads_psycopg(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "ragdesk.db")
    try:
        watch = DatabaseWatch.of(db)
        assert not watch.watched and watch.problem() is None
    finally:
        db.close()
    code = (
        "import sys; from app.errors import is_store_unavailable; import app.state;"
        " assert not is_store_unavailable(RuntimeError('x'));"
        " assert 'psycopg' not in sys.modules, 'psycopg imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
