"""The web UI in real headless Chromium against the real server and bundled models."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server import ServerProcess, http, sign_in

pytestmark = [pytest.mark.real, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
GUIDE = (
    "# Parking guide\n\nVisitors park in the north car park.\n\n"
    "## Permits\n\nA staff parking permit costs 12 euros per month and is renewed every January.\n"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is required: apt-get install chromium (make test does it)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, real_server: ServerProcess) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 860}, base_url=real_server.url)
    requests: list[str] = []
    context.on("request", lambda request: requests.append(request.url))
    page = context.new_page()
    page.requests = requests  # type: ignore[attr-defined]
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    sign_in(page, real_server.username, real_server.password)
    yield page
    assert all(url.startswith(real_server.url) for url in requests), "no request leaves the server"
    assert errors == [], errors
    context.close()


def drop_file(page: Any, name: str, content: str) -> None:
    """A genuine drop event carrying a File, as when a user drags one onto the window."""
    transfer = page.evaluate_handle(
        """([name, content]) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([content], name, { type: "text/markdown" }));
            return transfer;
        }""",
        [name, content],
    )
    page.dispatch_event("#messages", "drop", {"dataTransfer": transfer})


def test_drop_upload_ask_stream_and_open_citation(page: Any) -> None:
    page.goto("/")
    drop_file(page, "parking.md", GUIDE)
    row = page.locator(".upload-row").filter(has_text="parking.md")
    row.wait_for()
    page.wait_for_function(
        "() => document.querySelector('.upload-row')?.dataset.status === 'indexed'", timeout=60_000
    )
    assert "indexed" in row.inner_text()
    page.click("[data-close-dialog]")

    page.evaluate(
        """() => {
            window.sseMessages = 0;
            document.body.addEventListener("htmx:sseMessage", () => window.sseMessages++);
            window.reading = null;  // what the answer said it reads, before its first token
            new MutationObserver(() => {
                const line = document.querySelector(".msg.streaming .reading");
                const body = document.querySelector(".msg.streaming .msg-body");
                if (line && window.reading === null) {
                    window.reading = [line.innerText, body.innerText];
                }
            }).observe(document.body, { childList: true, subtree: true });
        }"""
    )
    page.fill("#question", "How much does a staff parking permit cost?")
    page.keyboard.press("Enter")
    answer = page.locator("article.msg.assistant:not(.streaming)").last
    answer.wait_for(timeout=60_000)
    assert page.evaluate("window.sseMessages") >= 3, "tokens arrived as separate SSE messages"
    assert "12 euros" in answer.inner_text()
    reading, written = page.evaluate("window.reading")
    # how many passages depends on what other tests of this server uploaded first
    assert re.match(r"Reading \d passages: \[1\] Parking guide, page 1", reading), reading
    assert written == ""  # shown while the model had not written anything yet
    assert page.locator("#sources-pane .source").count() >= 1
    assert page.url.rstrip("/").split("/")[-2] == "c"  # the conversation got its own URL

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "chat.png"))
    page.emulate_media(color_scheme="dark")  # the theme follows the system setting
    page.screenshot(path=str(SCREENSHOTS / "chat-dark.png"))
    page.emulate_media(color_scheme="light")

    answer.locator("a.cite").first.click()  # the passage opens in the inspector
    with page.context.expect_page() as opened:
        page.click("#passage-open-full")  # and in full in the page viewer
    viewer = opened.value
    viewer.wait_for_load_state()
    passage = viewer.locator("mark#passage")
    assert "12 euros per month" in passage.inner_text()
    viewer.screenshot(path=str(SCREENSHOTS / "document.png"))


def test_rejected_and_failed_uploads_show_reasons(page: Any, tmp_path: Path) -> None:
    page.goto("/")
    page.click("[data-open-dialog=upload-dialog]")
    empty, binary = tmp_path / "empty.txt", tmp_path / "tool.exe"
    empty.write_bytes(b"")
    binary.write_bytes(b"MZ\x00\x01binary")
    page.set_input_files("#upload-input", [str(empty), str(binary)])
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector(".upload-row[data-status=rejected]")
    page.wait_for_selector(".upload-row[data-status=failed]", timeout=30_000)
    assert "empty" in page.locator(".upload-row[data-status=failed] .reason").inner_text()
    page.screenshot(path=str(SCREENSHOTS / "upload.png"))


def test_conversation_reopens_and_a_document_can_be_deleted(
    page: Any, real_server: ServerProcess
) -> None:

    upload = http.post(
        f"{real_server.url}/api/documents",
        files=[("file", ("canteen.md", b"# Canteen\n\nThe canteen serves soup every Friday."))],
    )
    document_id = upload.json()["documents"][0]["id"]
    page.goto("/collections/1")  # the collection's document table
    page.wait_for_function(
        f"() => document.querySelector('#document-{document_id} .status-indexed') !== null",
        timeout=60_000,
    )
    page.goto("/")
    page.fill("#question", "When does the canteen serve soup?")
    page.keyboard.press("Enter")
    page.locator("article.msg.assistant:not(.streaming)").last.wait_for(timeout=60_000)
    conversation_url = page.url

    page.goto("/")  # a new chat, then back to the earlier one from the sidebar
    page.locator("#conversation-list a", has_text="When does the canteen serve soup?").first.click()
    page.wait_for_url(conversation_url)
    question = page.locator("article.msg.user .msg-body").first.inner_text()
    assert question == "When does the canteen serve soup?"
    assert page.locator("article.msg.assistant").count() >= 1

    page.goto("/collections/1")
    page.click(f"#document-{document_id} button[aria-label^='Delete']")
    page.click("#confirm-ok")  # the app's own dialog: "Delete this document…?"
    page.wait_for_selector(f"#document-{document_id}", state="detached")
    hits = http.post(
        f"{real_server.url}/api/search", json={"query": "canteen soup Friday", "k": 5}
    ).json()["hits"]
    assert all(hit["document_id"] != document_id for hit in hits)
