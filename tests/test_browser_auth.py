"""Signing in and out in real headless Chromium: the redirect to /login and back, the
error for a wrong password, htmx requests carrying the CSRF token, sign out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import TEST_PASSWORD, TEST_USER
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture
from tests.test_browser_ui import InProcessServer

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    running = InProcessServer(tmp_path_factory.mktemp("auth-ui") / "data").start()
    running.app.state.services.auth.users.create(TEST_USER, TEST_PASSWORD, role="admin")
    try:
        yield running
    finally:
        running.stop()


def test_sign_in_ask_and_sign_out(browser: Any, server: InProcessServer) -> None:  # noqa: F811
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    page.goto("/c/1")  # a page behind the sign-in
    assert page.url.startswith(f"{server.url}/login?next=")
    page.fill("#login-name", TEST_USER)
    page.fill("#login-password", "not the password")
    page.click("#login-submit")
    assert page.locator("[role=alert]").inner_text() == "Wrong user name or password."
    page.fill("#login-name", TEST_USER)
    page.fill("#login-password", TEST_PASSWORD)
    page.click("#login-submit")
    page.wait_for_url("**/c/1")  # back where they were going (a 404 page: no such chat yet)
    page.goto("/")
    with page.expect_response("**/ui/ask") as asked:  # htmx POST with the CSRF header
        page.fill("#question", "When is soup served?")
        page.keyboard.press("Enter")
    assert asked.value.status == 200
    assert asked.value.request.headers.get("x-csrf-token")
    page.click("#logout")
    page.wait_for_url("**/login")
    page.goto("/")
    assert "/login" in page.url
    context.close()
