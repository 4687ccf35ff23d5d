"""Stop, markdown with Copy buttons, theme toggle and keyboard shortcuts in real headless
Chromium, against an in-process server whose fake model the tests script."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.factory import create_app
from llm.backend import FakeBackend, wait_idle
from tests.conftest import TEST_PASSWORD, TEST_USER, fake_settings
from tests.server import free_port, sign_in
from tests.test_browser import SCREENSHOTS, browser  # noqa: F401 - the shared Chromium fixture

pytestmark = [pytest.mark.browser]

LIGHT_BG, DARK_BG = "rgb(244, 245, 247)", "rgb(21, 24, 30)"
MARKDOWN_ANSWER = [
    "To upload:\n\n",
    "1. Open **Upload documents…** [1]\n",
    "2. Drop the files\n\n",
    "Or from a shell:\n\n",
    "```\n",
    "curl -F file=@a.pdf http://127.0.0.1:8000/api/documents\n",
    "```\n",
]
HOSTILE_ANSWER = [
    '<img src="/static/favicon.svg?x" onerror="alert(1)"> ',
    "![remote](http://evil.example/x.png) [evil](javascript:alert(1)) <script>alert(2)</script>",
]


class InProcessServer:
    """The app served by uvicorn on a thread, so a test can reach its fake model."""

    def __init__(self, data_dir: Path) -> None:
        import uvicorn

        self.app = create_app(fake_settings(data_dir))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        config.timeout_graceful_shutdown = 2
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> InProcessServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        self.app.state.services.wait_until_loaded(30)
        return self

    @property
    def model(self) -> FakeBackend:
        backend = self.app.state.services.require_models().get("default")
        assert isinstance(backend, FakeBackend)
        return backend

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    running = InProcessServer(tmp_path_factory.mktemp("ui-server") / "data").start()
    auth = running.app.state.services.auth  # the account pages sign in with, and an API key
    key, _ = auth.keys.create(auth.users.create(TEST_USER, TEST_PASSWORD, role="admin"))
    headers = {"Authorization": f"Bearer {key}"}
    guide = b"# Upload\n\nOpen Upload documents and drop the files to upload them."
    created = httpx.post(
        f"{running.url}/api/documents", files=[("file", ("up.md", guide))], headers=headers
    )
    document_id = created.json()["documents"][0]["id"]
    deadline = time.monotonic() + 30
    url = f"{running.url}/api/documents/{document_id}"
    while httpx.get(url, headers=headers).json()["status"] != "indexed":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    try:
        yield running
    finally:
        running.stop()


@contextmanager
def watched_page(
    chromium: Any, server: InProcessServer, *, clipboard: bool = False
) -> Iterator[tuple[Any, list[str]]]:
    """A signed-in page and the console errors it logs; on leaving, no request may have
    gone anywhere but the server."""
    context = chromium.new_context(viewport={"width": 1400, "height": 860}, base_url=server.url)
    if clipboard:
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    requests: list[str] = []
    context.on("request", lambda request: requests.append(request.url))
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.console_errors = errors
    page.emulate_media(color_scheme="light")
    server.model.token_delay_s = 0.0
    sign_in(page, TEST_USER, TEST_PASSWORD)
    yield page, errors
    assert all(url.startswith(server.url) for url in requests), "no request leaves the server"
    context.close()


@pytest.fixture
def page(browser: Any, server: InProcessServer) -> Iterator[Any]:  # noqa: F811
    with watched_page(browser, server, clipboard=True) as (page, errors):
        yield page
        # A Stop that races the end of an answer may get a 404; the UI ignores it on purpose.
        assert [e for e in errors if "404" not in e] == [], errors


def ask(page: Any, question: str) -> None:
    page.fill("#question", question)
    page.keyboard.press("Enter")


def test_stop_button_and_escape_end_generation_on_the_server(
    page: Any, server: InProcessServer
) -> None:
    model = server.model
    chat = server.app.state.services.require_chat()
    for stop_with in ("button", "escape"):
        model.token_delay_s = 0.15
        model.enqueue([f" token{n}" for n in range(60)])  # 9 s if nothing stops it
        page.goto("/")
        ask(page, f"How do I upload files? ({stop_with})")
        streaming = page.locator("article.msg.streaming")
        streaming.locator(".msg-body", has_text="token2").wait_for(timeout=10_000)
        started = time.monotonic()
        if stop_with == "button":
            streaming.locator(".stop-button").click()
        else:
            page.keyboard.press("Escape")
        stopped = page.locator("article.msg.assistant:not(.streaming)").last
        stopped.locator(".stopped-mark").wait_for(timeout=5_000)
        assert time.monotonic() - started < 3
        assert wait_idle(model, 2.0), "the server stopped generating"
        assert not chat.running._running, "nothing is left registered as running"
        text = stopped.inner_text()
        assert "token2" in text and "token50" not in text
        assert page.locator(".stop-button").count() == 0
        page.reload()  # the stored answer is the stopped one
        assert page.locator("article.msg.assistant .stopped-mark").count() == 1


def test_markdown_answer_renders_with_a_working_copy_button(
    page: Any, server: InProcessServer
) -> None:
    server.model.enqueue(MARKDOWN_ANSWER)
    page.goto("/")
    ask(page, "How do I upload files?")
    answer = page.locator("article.msg.assistant:not(.streaming)").last
    answer.wait_for(timeout=10_000)
    body = answer.locator(".msg-body.markdown")
    assert body.locator("ol > li").count() == 2
    assert body.locator("strong").first.inner_text() == "Upload documents…"
    assert (
        body.locator("a.cite").first.get_attribute("href", timeout=1000).startswith("/documents/")
    )
    assert body.locator("img").count() == 0
    assert all(
        not (link.get_attribute("href") or "").startswith("javascript:")
        for link in body.locator("a").all()
    )
    code = body.locator("pre code")
    assert code.inner_text().startswith("curl -F file=@a.pdf")
    copy = body.locator("pre .copy-code")
    copy.click()
    page.wait_for_function(
        "() => document.querySelector('pre .copy-code').textContent === 'Copied'"
    )
    clipboard = page.evaluate("navigator.clipboard.readText()")
    assert clipboard == "curl -F file=@a.pdf http://127.0.0.1:8000/api/documents\n"

    page.reload()  # the stored answer renders the same way, Copy button included
    page.locator("article.msg.assistant pre .copy-code").last.wait_for()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "markdown.png"))
    page.click("#theme-toggle")
    page.screenshot(path=str(SCREENSHOTS / "markdown-dark.png"))
    page.click("#theme-toggle")
    page.click("#theme-toggle")  # back to automatic

    server.model.enqueue(HOSTILE_ANSWER)  # nothing of it becomes markup or loads
    ask(page, "How do I upload files, once more?")
    page.locator("article.msg.assistant:not(.streaming)").nth(1).wait_for(timeout=10_000)
    assert (
        page.locator("#messages img, #messages script, #messages a[href^=javascript]").count() == 0
    )
    assert "<script>alert(2)</script>" in page.locator("article.msg.assistant").last.inner_text()


def background(page: Any) -> str:
    return str(page.evaluate("getComputedStyle(document.body).backgroundColor"))


def test_theme_follows_the_system_and_the_toggle_persists(page: Any) -> None:
    page.goto("/")
    toggle = page.locator("#theme-toggle")
    assert toggle.get_attribute("data-mode") == "auto" and background(page) == LIGHT_BG
    page.emulate_media(color_scheme="dark")
    assert background(page) == DARK_BG  # automatic: follows the system

    page.emulate_media(color_scheme="light")
    toggle.click()
    assert toggle.get_attribute("data-mode") == "dark" and background(page) == DARK_BG
    page.reload()
    assert background(page) == DARK_BG  # applied before app.js, from localStorage
    assert page.evaluate("localStorage.getItem('ragdesk.theme')") == "dark"
    page.emulate_media(color_scheme="dark")
    page.emulate_media(color_scheme="light")
    assert background(page) == DARK_BG  # an explicit choice ignores the system

    toggle.click()
    assert toggle.get_attribute("data-mode") == "light" and background(page) == LIGHT_BG
    toggle.click()
    assert toggle.get_attribute("data-mode") == "auto"
    assert page.evaluate("localStorage.getItem('ragdesk.theme')") is None
    page.reload()
    page.emulate_media(color_scheme="dark")
    assert background(page) == DARK_BG


def test_keyboard_shortcuts_and_the_help_overlay(page: Any) -> None:
    page.goto("/")
    page.locator("body").press("?")
    assert page.locator("#help-dialog").evaluate("d => d.open")
    assert "New chat" in page.locator("#help-dialog").inner_text()
    page.keyboard.press("Escape")
    assert not page.locator("#help-dialog").evaluate("d => d.open")

    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "question"
    page.keyboard.type("nut")  # letters typed into the question are text, not shortcuts
    assert page.input_value("#question") == "nut"
    assert not page.locator("#upload-dialog").evaluate("d => d.open")
    page.locator("#question").blur()

    page.keyboard.press("f")
    assert page.evaluate("document.activeElement.id") == "conversation-filter"
    page.keyboard.type("nut")  # typed into the filter, not taken as shortcuts
    assert page.input_value("#conversation-filter") == "nut"
    page.locator("#conversation-filter").fill("")
    page.locator("#conversation-filter").blur()

    page.keyboard.press("u")
    assert page.locator("#upload-dialog").evaluate("d => d.open")
    page.keyboard.press("Escape")
    assert not page.locator("#upload-dialog").evaluate("d => d.open")
    # Chrome hands the focus back from the dialog's file input a moment after it closes; a
    # key pressed before that lands in the input (a text box: no shortcut), so wait for it.
    page.wait_for_function("() => !document.activeElement.closest('dialog')")

    page.keyboard.press("t")
    assert page.locator("#theme-toggle").get_attribute("data-mode") == "dark"
    page.keyboard.press("t")
    page.keyboard.press("t")
    assert page.locator("#theme-toggle").get_attribute("data-mode") == "auto"

    page.goto("/?from=test")
    page.keyboard.press("n")
    page.wait_for_url(lambda url: url.endswith("/"))
