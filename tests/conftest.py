"""Shared fixtures: every test gets its own data directory under tmp_path."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach for a model hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The suite runs on the small bundled model (fast); the shipped default is measured in
# bench.answers. Servers the tests start inherit this.
os.environ.setdefault("RAGDESK_BUNDLED_MODEL", "gemma-3-270m")

from app.auth.principal import Role, User
from app.auth.sessions import COOKIE_NAME
from app.config.settings import Settings
from app.factory import create_app
from llm.backend import FakeBackend

FIXTURES = Path(__file__).parent / "fixtures"


def fake_settings(data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "embedder_backend": "fake",
        "generator_backend": "fake",
        "load_samples": False,
        "index_checkpoint_seconds": 0.2,
        "min_score": 0.1,
        # Scripted answers test rendering and escaping: shown as written, not withheld
        # for lack of support (tests of withholding turn it on).
        "withhold_unsupported": False,
        # Cheap password hashes and no request rate limit: tests sign in many times.
        "password_time_cost": 1,
        "password_memory_kib": 64,
        "password_parallelism": 1,
        "rate_limit_per_minute": 0,
        "allowed_hosts": ["testserver.local", "localhost", "127.0.0.1"],  # TestClient's host
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return fake_settings(tmp_path / "data")


TEST_USER = "tester"
TEST_PASSWORD = "correct horse battery staple"


def login(client: TestClient[Any], name: str = TEST_USER, password: str = TEST_PASSWORD) -> str:
    """Sign ``client`` in through the login form; it then sends the session's CSRF token
    with every request, as the UI's htmx does. Returns the token."""
    response = client.post(
        "/login", data={"name": name, "password": password}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    session = client.app.state.services.auth.sessions.get(client.cookies[COOKIE_NAME])
    assert session is not None
    client.headers["X-CSRF-Token"] = session.csrf_token
    return str(session.csrf_token)


def add_user(client: TestClient[Any], name: str, role: Role = "staff") -> User:
    """A user with ``TEST_PASSWORD`` in a running app."""
    user: User = client.app.state.services.auth.users.create(name, TEST_PASSWORD, role)
    return user


def add_key(client: TestClient[Any], name: str = TEST_USER, **scope: Any) -> str:
    """A new API key of user ``name`` (``read_only=``, ``collections=`` as ApiKeys.create)."""
    auth = client.app.state.services.auth
    key, _ = auth.keys.create(auth.users.by_name(name), **scope)
    return str(key)


@contextmanager
def signed_in(settings: Settings) -> Iterator[TestClient[Any]]:
    """``TestClient(create_app(settings))``, loaded, with ``tester`` (admin) signed in."""
    with TestClient(create_app(settings)) as test_client:
        test_client.app.state.services.wait_until_loaded(30)
        auth = test_client.app.state.services.auth
        if auth.users.by_name(TEST_USER) is None:
            add_user(test_client, TEST_USER, "admin")
        login(test_client)
        yield test_client


@pytest.fixture
def anonymous_client(settings: Settings) -> Iterator[TestClient[Any]]:
    """No session, no key: for the tests of what is refused."""
    with TestClient(create_app(settings)) as test_client:
        test_client.app.state.services.wait_until_loaded(30)
        yield test_client


@pytest.fixture
def client(anonymous_client: TestClient[Any]) -> TestClient[Any]:
    """Signed in as ``tester``, an admin (sees every collection), with the CSRF header."""
    add_user(anonymous_client, TEST_USER, "admin")
    login(anonymous_client)
    return anonymous_client


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def upload(client: TestClient[Any], *files: tuple[str, bytes]) -> Any:
    return client.post("/api/documents", files=[("file", (name, data)) for name, data in files])


def wait_indexed(client: TestClient[Any], document_id: int) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        document: dict[str, Any] = client.get(f"/api/documents/{document_id}").json()
        return document if document["status"] in ("indexed", "failed") else None

    result: dict[str, Any] = wait_for(done)
    return result


def sse_events(body: str) -> list[tuple[str, str]]:
    """(event, data) pairs of a text/event-stream body."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            events.append((name, "\n".join(data)))
    return events


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real server with the bundled models, shared by the end-to-end tests."""
    from tests.server import ServerProcess

    root = tmp_path_factory.mktemp("real-server")
    server = ServerProcess(root / "data", root / "server.log").start()
    try:
        yield server
    finally:
        server.stop()


def fake_model(client: TestClient[Any]) -> FakeBackend:
    """The fake backend a ``client`` app answers with (to script or inspect it)."""
    backend = client.app.state.services.require_models().get("default")
    assert isinstance(backend, FakeBackend)
    return backend


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One real PostgreSQL with pgvector for the whole session (tests/pg_kit.py)."""
    from tests.pg_kit import PgServer

    try:
        server = PgServer()
    except Exception as error:
        pytest.skip(f"pgserver could not start PostgreSQL: {error!r}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _store_under_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """With ``RAGDESK_TEST_STORE=postgresql``, each test (and each server it starts) runs
    on a fresh PostgreSQL database instead of SQLite."""
    from tests.pg_kit import database_for_test, store_under_test

    if store_under_test() != "postgresql":
        yield None
        return
    server = request.getfixturevalue("pg_server")
    with database_for_test(server) as url:
        monkeypatch.setenv("RAGDESK_DATABASE_URL", url)
        yield url


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    """A real S3 server (moto in server mode) on a loopback port, for one test module."""
    from moto.server import ThreadedMotoServer

    from tests.server import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def bucket(s3_url: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A bucket of its own for the test, emptied and removed after it."""
    import boto3

    s3 = boto3.resource(
        "s3",
        endpoint_url=s3_url,
        region_name="us-east-1",
        aws_access_key_id="setup",
        aws_secret_access_key="setup",
    )
    name = "rd-" + request.node.name.replace("_", "-")[:40].lower().strip("-")
    made = s3.create_bucket(Bucket=name)
    yield made
    made.objects.all().delete()
    made.delete()


@contextmanager
def logs_captured(caplog: pytest.LogCaptureFixture, *names: str) -> Iterator[None]:
    """``caplog`` at DEBUG, also once the app has replaced the root logger's handlers
    (Litestar's logging config, at start): held by the named loggers themselves."""
    caplog.set_level(logging.DEBUG)
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(caplog.handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(caplog.handler)
            logger.setLevel(level)
