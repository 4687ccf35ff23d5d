"""The desktop UI, round two b (issue #14's remaining items), in real headless Chromium against
an in-process server: the narrow layout (390 and 360 px) with its drawers, the question's
scope kept with the conversation, cited passages shown in the inspector, the drop overlay."""

# ruff: noqa: F811 - pytest fixtures are imported from tests.desktop_kit
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_PASSWORD, TEST_USER
from tests.desktop_kit import SignedInServer, answered, page, server  # noqa: F401
from tests.server import sign_in
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture

pytestmark = [pytest.mark.browser]

SHOTS = Path("/tmp/ragdesk-round2b")


@contextmanager
def sized(browser: Any, server: SignedInServer, width: int) -> Iterator[Any]:
    """A signed-in page ``width`` px wide (a phone's 844 px tall) that fails on console errors."""
    context = browser.new_context(
        viewport={"width": width, "height": 844}, base_url=server.url, has_touch=True
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.emulate_media(color_scheme="light")
    server.model.token_delay_s = 0.0
    sign_in(page, TEST_USER, TEST_PASSWORD)
    try:
        yield page
        assert errors == [], errors
    finally:
        context.close()


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), caret="initial")  # no injected style


def no_horizontal_scroll(page: Any) -> None:
    overflow = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert overflow[0] <= overflow[1], overflow


def inside_viewport(page: Any, selector: str) -> None:
    page.wait_for_function(  # a drawer slides in: wait until it is in
        "s => { const r = document.querySelector(s).getBoundingClientRect();"
        " return r.left >= 0 && r.right <= innerWidth + 0.5; }",
        arg=selector,
    )
    box = page.locator(selector).bounding_box()
    viewport = page.viewport_size
    assert box is not None, selector
    assert box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"] + 0.5, (selector, box)
    assert box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"] + 0.5, (selector, box)


def upload_to(server: SignedInServer, collection: str, name: str, data: bytes) -> int:
    created = httpx.post(
        f"{server.url}/api/documents",
        params={"collection": collection},
        files=[("file", (name, data))],
        headers=server.headers,
    )
    assert created.status_code < 300, created.text
    document_id = int(created.json()["documents"][0]["id"])
    deadline = time.monotonic() + 30
    while server.get(f"/api/documents/{document_id}").json()["status"] != "indexed":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return document_id


def new_collection(server: SignedInServer, name: str) -> int:
    created = httpx.post(
        f"{server.url}/api/collections", json={"name": name}, headers=server.headers
    )
    assert created.status_code == 201, created.text
    return int(created.json()["id"])


# --- 1. the narrow layout ---------------------------------------------------------------------


@pytest.mark.parametrize("width", [390, 360])
def test_narrow_window_drawers_ask_and_cite(
    browser: Any, server: SignedInServer, width: int
) -> None:
    with sized(browser, server, width) as page:
        page.goto("/")
        sidebar, inspector = page.locator("#sidebar"), page.locator("#inspector")
        assert not sidebar.is_visible() and not inspector.is_visible()  # closed by default
        inside_viewport(page, "#question")
        inside_viewport(page, "#ask-form button[type=submit]")
        no_horizontal_scroll(page)

        page.click("#sidebar-toggle")  # the sidebar drawer: opens, Escape closes it
        sidebar.locator("#conversation-filter").wait_for(state="visible")
        assert page.locator("#sidebar-toggle").get_attribute("aria-expanded") == "true"
        inside_viewport(page, "#sidebar")
        shot(page, f"narrow-{width}-sidebar")
        page.keyboard.press("Escape")
        page.wait_for_function("() => !document.documentElement.dataset.drawer")
        assert page.locator("#sidebar-toggle").get_attribute("aria-expanded") == "false"
        page.click("#inspector-toggle")  # the sources drawer: a click on the backdrop closes it
        page.wait_for_function("() => document.documentElement.dataset.drawer === 'inspector'")
        page.mouse.click(20, 300)
        page.wait_for_function("() => !document.documentElement.dataset.drawer")

        server.model.enqueue(["Open Upload documents and drop the files [1]."])
        answer = answered(page, f"How do I upload at {width} px?", "drop the files")
        no_horizontal_scroll(page)
        inside_viewport(page, "#ask-form button[type=submit]")
        pages_before = len(page.context.pages)
        answer.locator("a.cite").first.click()  # the passage, in the sources drawer
        page.locator("#passage-view mark#passage").wait_for()
        assert "drop the files" in page.locator("#passage-view mark#passage").inner_text()
        page.wait_for_function("() => document.documentElement.dataset.drawer === 'inspector'")
        inside_viewport(page, "#inspector")
        assert len(page.context.pages) == pages_before
        no_horizontal_scroll(page)
        shot(page, f"narrow-{width}-passage")
        page.keyboard.press("Escape")
        page.wait_for_function("() => !document.documentElement.dataset.drawer")

        page.click("#menu-file")  # the menus fit the screen too
        inside_viewport(page, "#menu-file-items")
        page.keyboard.press("Escape")
        page.keyboard.press("u")  # the upload dialog fits
        inside_viewport(page, "#upload-dialog")
        page.keyboard.press("Escape")

        page.goto(f"/collections/{server.app.state.services.collection_id}")
        page.locator("#document-table").wait_for()
        no_horizontal_scroll(page)
        inside_viewport(page, "#document-table tbody tr .col-actions")
        shot(page, f"narrow-{width}-documents")


# --- 2. the question's scope ------------------------------------------------------------------


def test_a_conversation_scoped_to_one_collection_cites_only_it(
    page: Any, server: SignedInServer
) -> None:
    alpha, beta = new_collection(server, "alpha"), new_collection(server, "beta")
    upload_to(server, "alpha", "alpha-hours.md", b"# Alpha hours\n\nThe depot opens at 7:00.")
    upload_to(server, "beta", "beta-hours.md", b"# Beta hours\n\nThe depot opens at 9:30.")
    page.goto("/")
    assert page.locator("#scope-label").inner_text() == "All collections"
    assert page.locator("#library .collection-item.selected").count() == 0  # no false scope
    page.click("#scope-summary")
    for box in page.locator("[data-scope-collection]").all():
        if box.get_attribute("value") != str(beta):
            box.uncheck()
    assert page.locator("#scope-label").inner_text() == "beta"
    page.keyboard.press("Escape")
    server.model.enqueue(["The depot opens at 9:30 [1]."])
    answer = answered(page, "When does the depot open?", "depot opens")
    conversation_id = int(page.url.rstrip("/").split("/")[-1])
    stored = server.app.state.services.conversations.get(conversation_id)
    assert stored.scope == frozenset({beta})
    message = server.app.state.services.conversations.messages(conversation_id)[-1]
    store = server.app.state.services.store
    cited = {store.get_document(c.document_id).collection_id for c in message.citations}
    assert cited == {beta}, cited
    assert answer.locator("a.cite").count() >= 1

    page.reload()  # the scope is the conversation's: it survives a reload
    assert page.locator("#scope-label").inner_text() == "beta"
    assert page.locator(f"[data-scope-collection][value='{beta}']").is_checked()
    assert not page.locator(f"[data-scope-collection][value='{alpha}']").is_checked()
    page.click("#scope-summary")  # widened again from the control: stored at once
    for box in page.locator("[data-scope-collection]").all():
        box.check()
    page.wait_for_function(
        "() => document.getElementById('scope-input').value === ''"
    )  # all of them ticked: "all", which covers collections added later
    deadline = time.monotonic() + 5
    while server.app.state.services.conversations.get(conversation_id).scope is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    page.goto("/")  # a new conversation searches all again
    assert page.locator("#scope-label").inner_text() == "All collections"


# --- 3. sources inside the window -------------------------------------------------------------


def test_a_citation_opens_its_passage_in_the_inspector_not_a_tab(
    page: Any, server: SignedInServer
) -> None:
    server.model.enqueue(["Open Upload documents and drop the files [1]."])
    page.goto("/")
    answer = answered(page, "Open Upload documents and drop the files?", "drop the files")
    opened: list[Any] = []
    page.context.on("page", lambda p: opened.append(p))
    answer.locator("a.cite").first.click()
    mark = page.locator("#passage-view mark#passage")
    mark.wait_for()
    assert "drop the files" in mark.inner_text()
    assert page.locator("#passage-position").inner_text() == "Citation 1 of 1"
    full = page.locator("#passage-open-full")
    assert "/documents/" in str(full.get_attribute("href"))
    assert full.get_attribute("target") == "_blank"
    page.wait_for_timeout(300)
    assert opened == [] and len(page.context.pages) == 1  # no new page or tab
    assert page.url.split("/")[-2] == "c"  # still the conversation
    shot(page, "passage-in-inspector")
    page.click("[data-close-passage]")
    assert page.locator("#passage-view").inner_html().strip() == ""


# --- 4. upload rough edges --------------------------------------------------------------------


def test_dragging_files_over_the_window_shows_the_drop_overlay(
    page: Any, server: SignedInServer
) -> None:
    page.goto(f"/collections/{server.app.state.services.collection_id}")
    overlay = page.locator("#drop-overlay")
    assert not overlay.is_visible()
    page.evaluate(
        """() => {
        const data = new DataTransfer();
        const note = "# Dropped\\n\\nA dropped note.";
        data.items.add(new File([note], "dropped.md", {type: "text/markdown"}));
        window.__drop = data;
        const enter = new DragEvent("dragenter", {bubbles: true, dataTransfer: data});
        document.body.dispatchEvent(enter);
        }"""
    )
    overlay.wait_for(state="visible")
    assert "default" in page.locator("#drop-target").inner_text()
    shot(page, "drop-overlay")
    page.evaluate(
        "() => document.body.dispatchEvent(new DragEvent('drop', "
        "{bubbles: true, cancelable: true, dataTransfer: window.__drop}))"
    )
    overlay.wait_for(state="hidden")
    row = page.locator("#upload-rows .upload-row", has_text="dropped.md")
    row.wait_for()
    page.locator("#upload-rows .upload-row[data-status=indexed]", has_text="dropped.md").wait_for(
        timeout=30_000
    )
    text = row.inner_text()
    assert "1 passage" in text and "1 passages" not in text, text
