"""Shared fixtures: every test gets its own data directory under tmp_path."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach for a model hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from app.factory import create_app
from app.settings import Settings
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
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return fake_settings(tmp_path / "data")


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient[Any]]:
    with TestClient(create_app(settings)) as test_client:
        test_client.app.state.services.wait_until_loaded(30)
        yield test_client


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
