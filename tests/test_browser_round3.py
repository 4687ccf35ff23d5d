"""Round three in real headless Chromium: controls that match rights, one numbering on
the page, citations that still open after re-ingest, and the question box's prefetch."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import pytest

from tests.conftest import TEST_PASSWORD
from tests.server import sign_in
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture
from tests.test_browser_ui import InProcessServer

pytestmark = [pytest.mark.browser]

POLICY = (
    b"# Hotels\n\nThe hotel cap is 180 pounds a night in London for staff travel.\n\n"
    b"# Meals\n\nThe daily meal allowance abroad is 45 euros for staff travel.\n"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    running = InProcessServer(tmp_path_factory.mktemp("round3") / "data").start()
    services = running.app.state.services
    admin = services.auth.users.create("boss", TEST_PASSWORD, role="admin")
    reader = services.auth.users.create("reader", TEST_PASSWORD, role="staff")
    collection = services.collection_id
    services.auth.members.add(collection, reader.id, can_write=False)
    document, _ = services.library.submit(
        data=POLICY, filename="travel.md", collection_id=collection
    )
    deadline = time.monotonic() + 30
    while services.store.get_document(document.id).status.value != "indexed":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    running.document_id = document.id  # type: ignore[attr-defined]
    running.admin = admin  # type: ignore[attr-defined]
    try:
        yield running
    finally:
        running.stop()


def _page(browser: Any, server: InProcessServer, user: str, width: int = 1280) -> Any:  # noqa: F811
    context = browser.new_context(base_url=server.url, viewport={"width": width, "height": 800})
    page = context.new_page()
    sign_in(page, user, TEST_PASSWORD)
    return page


def test_a_read_only_member_sees_no_write_control(browser: Any, server: InProcessServer) -> None:  # noqa: F811
    collection = server.app.state.services.collection_id
    for user, writes in (("reader", False), ("boss", True)):
        page = _page(browser, server, user)
        page.goto(f"/collections/{collection}")
        page.wait_for_selector(f"#document-{server.document_id}")  # type: ignore[attr-defined]
        row = page.locator(f"#document-{server.document_id}")  # type: ignore[attr-defined]
        assert row.get_by_label(re.compile("^Download")).count() == 1  # reading is allowed
        assert row.get_by_label(re.compile("^Re-ingest")).count() == int(writes), user
        assert row.get_by_label(re.compile("^Delete")).count() == int(writes), user
        assert page.locator("text=Upload…").count() == int(writes), user
        page.context.close()


def test_the_page_shows_the_prompts_numbers_and_they_survive_reingest(
    browser: Any,  # noqa: F811
    server: InProcessServer,
) -> None:
    page = _page(browser, server, "boss")
    server.model.enqueue(["The hotel cap is 180 pounds [2].", " Meals: 45 euros [1]."])
    page.fill("#question", "What are the hotel cap and meal allowance for staff travel?")
    page.keyboard.press("Enter")
    page.wait_for_selector("#messages article.msg.assistant:not(.streaming) a.cite")
    answer = page.locator("#messages article.msg.assistant").last
    prompt = server.model.history[-1].prompt
    services = server.app.state.services
    links = answer.locator("a.cite").all()
    assert len(links) == 2
    for link in links:  # each [n] opens the passage the prompt listed as [n]
        number = link.inner_text().strip("[]")
        chunk = int(re.search(r"chunk=(\d+)", link.get_attribute("href") or "").group(1))  # type: ignore[union-attr]
        line = next(x for x in reversed(prompt.splitlines()) if x.startswith(f"[{number}] "))
        assert services.store.chunk(chunk).text.split("\n")[-1][:30] in line
    href = links[0].get_attribute("href")
    assert href is not None

    page.request.post(
        f"/ui/documents/{server.document_id}/reingest",  # type: ignore[attr-defined]
        headers={"HX-Request": "true", "X-CSRF-Token": page.evaluate(_CSRF)},
    )
    deadline = time.monotonic() + 30
    while services.store.get_document(server.document_id).status.value != "indexed":  # type: ignore[attr-defined]
        assert time.monotonic() < deadline
        time.sleep(0.1)
    viewer = page.context.new_page()
    viewer.goto(href)
    assert viewer.locator("mark#passage").count() == 1  # still highlighted after re-ingest
    assert "Citation 1 of 2" in viewer.locator("#citation-position").inner_text()
    page.context.close()


_CSRF = "JSON.parse(document.body.getAttribute('hx-headers') || '{}')['X-CSRF-Token'] || ''"


def test_typing_a_question_prefetches_its_prompt(browser: Any, server: InProcessServer) -> None:  # noqa: F811
    page = _page(browser, server, "boss")
    before = len(server.model.prefetched)
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.url.endswith("/ui/prefetch") else None)
    page.click("#question")
    page.keyboard.type("What is the hotel cap in London", delay=20)
    page.wait_for_timeout(1200)  # past the box's pause before it sends the draft
    assert len(sent) >= 3, sent  # at the end of each word, not only after the pause
    deadline = time.monotonic() + 10
    while len(server.model.prefetched) == before:
        assert time.monotonic() < deadline, "no prefetch reached the model"
        time.sleep(0.05)
    prefix = server.model.prefetched[-1].prompt
    server.model.enqueue(["180 pounds [1]."])
    page.keyboard.press("Enter")
    page.wait_for_selector("#messages article.msg.assistant:not(.streaming)")
    assert server.model.history[-1].prompt.startswith(prefix)
    page.context.close()


def test_a_question_mark_sends_the_draft_at_once(browser: Any, server: InProcessServer) -> None:  # noqa: F811
    """The finished question's own draft goes before Enter, not only after a pause: its
    passages are those the answer will read."""
    page = _page(browser, server, "boss")
    drafts: list[str] = []

    def sent(request: Any) -> None:
        if request.url.endswith("/ui/prefetch"):
            drafts.append(parse_qs(request.post_data or "").get("message", [""])[0])

    page.on("request", sent)
    page.click("#question")
    # typed on at once: the pause never sees "…London?", only the question mark's keyup
    page.keyboard.type("What is the hotel cap in London? And", delay=20)
    page.wait_for_timeout(1200)
    assert "What is the hotel cap in London?" in drafts, drafts
    assert "What is the hotel cap in London? And" in drafts  # and the pause, as before
    page.context.close()


def test_an_opened_conversation_lands_on_its_latest_answer_with_its_sources(
    browser: Any,  # noqa: F811
    server: InProcessServer,
) -> None:
    """#26 item 8: opening a conversation landed at the top, the latest answer off-screen
    and the Sources pane empty."""
    page = _page(browser, server, "boss", width=1280)
    for n in range(6):  # enough turns to overflow the message list
        server.model.enqueue([f"Answer {n}: the hotel cap is 180 pounds [1]. " * 3])
        page.fill("#question", f"Question {n} about the hotel cap for staff travel?")
        page.keyboard.press("Enter")
        page.wait_for_function(
            f"() => document.querySelectorAll('#messages article.msg.assistant:not(.streaming)')"
            f".length === {n + 1}"
        )
    page.wait_for_url("**/c/*")
    url = page.url
    page.goto("/")
    page.goto(url)
    messages = page.locator("#messages")
    at_bottom = messages.evaluate("m => m.scrollTop + m.clientHeight >= m.scrollHeight - 4")
    overflows = messages.evaluate("m => m.scrollHeight > m.clientHeight")
    assert overflows and at_bottom
    latest = page.locator("#messages article.msg.assistant").last
    assert "selected" in (latest.get_attribute("class") or "")
    latest_id = latest.get_attribute("data-message")
    assert page.locator(f"#sources-pane #source-{latest_id}-1").count() == 1
    page.context.close()


def test_the_question_box_keeps_its_width_beside_a_model_and_a_scope_choice(
    browser: Any,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """#26 item 6: with a second chat model offered, the question box collapsed to 87 px
    at 1024 and the model's name was cut ("gemma-3-270m (default")."""
    from app.chat.local_models import ChatModels, LocalModels
    from app.config.settings import Settings
    from app.migrations import open_database
    from tests.test_local_models import gguf

    data = tmp_path_factory.mktemp("composer") / "data"
    settings = Settings(data_dir=data)  # the store the server will use (PostgreSQL too)
    db = open_database(settings)
    LocalModels(db, settings).add(gguf(data.parent / "tiny.gguf"), "tiny")
    ChatModels(db, settings).set_offered(["tiny"])
    db.close()
    running = InProcessServer(data).start()
    try:
        services = running.app.state.services
        services.auth.users.create("wide", TEST_PASSWORD, role="admin")
        services.store.ensure_collection("handbook")  # a scope to choose: two collections
        for width in (1024, 1280, 1600):
            page = _page(browser, running, "wide", width=width)
            page.goto("/")
            page.locator("#model-choice").wait_for()
            box = page.locator("#question").bounding_box()
            form = page.locator("#ask-form").bounding_box()
            assert box is not None and form is not None
            assert box["width"] >= 0.5 * form["width"], (width, box, form)
            select = page.locator("#model-choice")
            fits = select.evaluate("s => s.scrollWidth <= s.clientWidth + 1")
            assert fits, width  # the chosen model's name is not cut
            page.context.close()
    finally:
        running.stop()


@pytest.mark.parametrize("width", [1024, 390])
def test_admin_pages_live_in_the_app_window_and_fit_it(
    browser: Any,  # noqa: F811
    server: InProcessServer,
    width: int,
) -> None:
    """#26 item 6: /admin/sources (1040 px) and /admin/eval (1060 px) overflowed at 1024
    and were unusable at 390, outside the app window, each with its own sub-navigation."""
    page = _page(browser, server, "boss", width=width)
    pages = [
        "/admin", "/admin/groups", "/admin/sources", "/admin/feedback", "/admin/usage",
        "/admin/eval",
    ]  # fmt: skip
    for path in [*pages, "/account"]:
        page.goto(path)
        assert page.locator(".menubar").count() == 1, path  # the app's own menu bar
        nav = page.locator("nav.admin-nav")
        assert nav.locator("a[aria-current=page]").get_attribute("href") == path
        assert [a.get_attribute("href") for a in nav.locator("ul a").all()] == [
            *pages,
            "/account",
        ]  # one navigation, the same on every page
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= width, (path, wide)  # nothing wider than the window
    page.context.close()
