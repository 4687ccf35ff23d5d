"""Shared by the desktop UI browser tests: an in-process server with an account and an
API key, a signed-in Playwright page that fails on console errors, and small helpers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_PASSWORD, TEST_USER
from tests.test_browser_ui import InProcessServer, ask, watched_page


class SignedInServer(InProcessServer):
    """The in-process server with an admin account (browsers) and an API key (httpx)."""

    headers: dict[str, str]

    def provision(self) -> SignedInServer:
        auth = self.app.state.services.auth
        user = auth.users.create(TEST_USER, TEST_PASSWORD, role="admin")
        key, _ = auth.keys.create(user, name="tests")
        self.headers = {"Authorization": f"Bearer {key}"}
        return self

    def upload(self, name: str, data: bytes) -> int:
        created = httpx.post(
            f"{self.url}/api/documents", files=[("file", (name, data))], headers=self.headers
        )
        document_id = int(created.json()["documents"][0]["id"])
        deadline = time.monotonic() + 30
        while self.get(f"/api/documents/{document_id}").json()["status"] != "indexed":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        return document_id

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", headers=self.headers)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SignedInServer]:
    running = SignedInServer(tmp_path_factory.mktemp("desktop") / "data").start().provision()
    running.upload("up.md", b"# Upload\n\nOpen Upload documents and drop the files to upload them.")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def page(browser: Any, server: SignedInServer) -> Iterator[Any]:
    with watched_page(browser, server) as (page, errors):
        yield page
        assert errors == [], errors


def answered(page: Any, question: str, *tokens: str) -> Any:
    ask(page, question)
    answer = page.locator("article.msg.assistant:not(.streaming)").last
    answer.wait_for(timeout=10_000)
    if tokens:
        page.wait_for_function(
            "t => [...document.querySelectorAll('article.msg.assistant')].some("
            "a => a.innerText.includes(t))",
            arg=tokens[0],
        )
    page.wait_for_url("**/c/*")
    return answer


def width(page: Any, selector: str) -> float:
    return float(page.locator(selector).evaluate("e => e.getBoundingClientRect().width"))
