"""Property-based check of every operation in the app's own OpenAPI schema (schemathesis):
whatever a generated request holds, the answer is never a 5xx.

A real loopback server (uvicorn in a thread, fake models) serves the schema and the
requests, authenticated with an admin key; a few examples per operation keep it short.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from app.auth.service import open_auth
from app.factory import create_app
from app.migrations import open_database
from tests.conftest import fake_settings
from tests.server import free_port

EXAMPLES_PER_OPERATION = 4
# Operations that would lock the test's own key or account out; the rest is fair game.
SKIPPED = ("/revoke", "{key_id}", "/disabled", "/account/password", "/logout", "/members/remove")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    app_settings = fake_settings(
        tmp_path_factory.mktemp("fuzz") / "data", allowed_hosts=["127.0.0.1"]
    )
    app_settings.server.data_dir.mkdir(parents=True)
    db = open_database(app_settings)
    try:
        auth = open_auth(app_settings, db)
        admin = auth.users.create("fuzzer", "fuzzer password 123", role="admin")
        key, _ = auth.keys.create(admin, name="fuzz")
    finally:
        db.close()
    port = free_port()
    config = uvicorn.Config(create_app(app_settings), port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health/ready").status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    try:
        yield url, key
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_no_generated_request_gets_a_server_error(served: tuple[str, str]) -> None:
    url, key = served
    headers = {"Authorization": f"Bearer {key}"}
    schema = schemathesis.openapi.from_url(f"{url}/schema/openapi.json", headers=headers)
    operations = [result.ok() for result in schema.get_all_operations()]
    operations = [op for op in operations if not any(s in op.path for s in SKIPPED)]
    assert len(operations) > 20 and any(op.path == "/v1/chat/completions" for op in operations)
    strategy = st.one_of(*[op.as_strategy() for op in operations])
    failures: list[str] = []
    seen: list[Any] = []

    @settings(
        max_examples=EXAMPLES_PER_OPERATION * len(operations),
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def check(case: Any) -> None:
        response = case.call(base_url=url, headers=headers, timeout=30)
        if response.status_code >= 500:
            failures.append(f"{case.method} {case.formatted_path}: {response.status_code}")
        case.validate_response(response, checks=[not_a_server_error])
        seen.append((case.method, case.path, response.status_code))

    started = time.monotonic()
    try:
        check()
    finally:
        assert not failures, failures
    assert time.monotonic() - started < 90  # about 20 s on the 2-core machine
    assert len({(method, path) for method, path, _ in seen}) > 0.8 * len(operations)
