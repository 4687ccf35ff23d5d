"""Sharing in real headless Chromium: the owner shares a conversation through the Share
dialog of its header, the reader finds it under "Shared with me" and reads it, read-only,
with the passage of a collection they may not read hidden. Screenshots at 1280 and 390 px,
light and dark, go to docs/screenshots/."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.chat.redaction import HIDDEN_TITLE
from tests.conftest import TEST_PASSWORD
from tests.server import sign_in
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture
from tests.test_browser_ui import InProcessServer

pytestmark = [pytest.mark.browser]

SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
CANARY = "zanzibarquokka"  # only in team B's collection, which the reader may not read
DOCUMENTS = {
    "team-a": ("canteen.md", b"# Canteen\n\nThe canteen serves soup at noon on weekdays.\n"),
    "team-b": ("kitchen.md", f"# Kitchen\n\nThe secret soup is {CANARY}.\n".encode()),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    """Olga reads team-a and team-b (through groups), Ann team-a only."""
    running = InProcessServer(tmp_path_factory.mktemp("sharing") / "data").start()
    services = running.app.state.services
    auth = services.auth
    olga = auth.users.create("olga", TEST_PASSWORD)
    ann = auth.users.create("ann", TEST_PASSWORD)
    for team, (filename, data) in DOCUMENTS.items():
        collection = services.store.ensure_collection(team)
        group = auth.groups.create(f"{team}-readers")
        auth.groups.grant(group.id, collection)
        for member in (olga, ann) if team == "team-a" else (olga,):
            auth.groups.add_member(group.id, member.id)
        document, _ = services.library.submit(
            data=data, filename=filename, collection_id=collection
        )
        deadline = time.monotonic() + 30
        while services.store.get_document(document.id).status.value != "indexed":
            assert time.monotonic() < deadline
            time.sleep(0.1)
    try:
        yield running
    finally:
        running.stop()


def _page(browser: Any, server: InProcessServer, user: str, width: int = 1280) -> Any:  # noqa: F811
    context = browser.new_context(base_url=server.url, viewport={"width": width, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    page.emulate_media(color_scheme="light", reduced_motion="reduce")
    sign_in(page, user, TEST_PASSWORD)
    return page


def _shoot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.emulate_media(color_scheme="light", reduced_motion="reduce")
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), caret="initial")
    page.emulate_media(color_scheme="dark", reduced_motion="reduce")
    page.screenshot(path=str(SCREENSHOTS / f"{name}-dark.png"), caret="initial")
    page.emulate_media(color_scheme="light", reduced_motion="reduce")


def test_share_through_the_dialog_and_read_it_as_the_other_user(
    browser: Any,  # noqa: F811
    server: InProcessServer,
) -> None:
    owner = _page(browser, server, "olga")
    server.model.enqueue(["Soup is served at noon [1]; the secret soup has a name [2]."])
    owner.fill("#question", "What soup does the canteen serve, and what is the secret soup?")
    owner.keyboard.press("Enter")
    owner.wait_for_selector("#messages article.msg.assistant:not(.streaming) a.cite")
    assert owner.locator("#messages article.msg.assistant a.cite").count() == 2
    conversation = int(owner.url.rstrip("/").split("/")[-1])

    owner.click("#share-button")  # the dialog opens and loads who it is shared with
    owner.locator("#share-dialog #share-name").wait_for()
    assert owner.locator("#share-dialog .share-none").is_visible()
    owner.fill("#share-name", "nobody")  # a name that is no one's: said in the dialog
    owner.click("#share-submit")
    owner.locator("#share-dialog .dialog-error .error").wait_for()
    assert "no user named 'nobody'" in owner.locator("#share-dialog .dialog-error").inner_text()
    owner.fill("#share-name", "ann")
    owner.click("#share-submit")
    owner.locator("#share-dialog .share-row .share-name", has_text="ann").wait_for()
    assert owner.locator("#share-dialog [role=status]").inner_text() == "Shared with user ann."
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    owner.screenshot(path=str(SCREENSHOTS / "share-dialog.png"), caret="initial")
    owner.click("#share-done")
    assert not owner.locator("#share-dialog").is_visible()
    assert owner.errors == []
    owner.context.close()

    reader = _page(browser, server, "ann")
    link = reader.locator(f"#shared-with-me a[href='/shared/{conversation}']")
    link.wait_for()
    assert "olga" in link.inner_text()
    link.click()
    reader.wait_for_url(f"**/shared/{conversation}")
    reader.locator("article.msg.assistant").wait_for()
    assert reader.locator("#ask-form").count() == 0  # read-only: no composer, no controls
    for control in (".regenerate-button", ".edit-button", ".feedback", "#pin-button"):
        assert reader.locator(control).count() == 0, control
    assert reader.locator(".read-only-badge").inner_text() == "Read-only"
    assert "Shared by olga" in reader.locator("#shared-by").inner_text()
    hidden = reader.locator(".source-hidden")
    assert hidden.count() == 1 and HIDDEN_TITLE in hidden.inner_text()
    assert CANARY not in reader.content()
    assert reader.locator("#shared-with-me a[aria-current='page']").count() == 1
    _shoot(reader, "shared-conversation")

    reader.locator("article.msg.assistant a.cite").first.click()  # the passage A, inspector
    reader.locator("#passage-view mark#passage").wait_for()
    assert "soup at noon" in reader.locator("#passage-view mark#passage").inner_text()
    assert reader.errors == []
    reader.context.close()

    narrow = _page(browser, server, "ann", width=390)
    narrow.goto(f"/shared/{conversation}")
    narrow.locator("article.msg.assistant").wait_for()
    scroll = narrow.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert scroll <= 0, "the shared view scrolls sideways at 390 px"
    _shoot(narrow, "narrow-shared-conversation")
    narrow.context.close()

    owner = _page(browser, server, "olga", width=390)  # the owner's side, narrow
    owner.goto(f"/c/{conversation}")
    owner.click("#share-button")
    owner.locator("#share-dialog .share-row .share-name", has_text="ann").wait_for()
    assert owner.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    owner.screenshot(path=str(SCREENSHOTS / "narrow-share-dialog.png"), caret="initial")
    owner.click("#share-done")
    owner.set_viewport_size({"width": 1280, "height": 800})
    owner.goto("/shared")  # the overview: shared by me, with Revoke
    row = owner.locator("#shared-by-me-table tbody tr", has_text="ann")
    row.wait_for()
    owner.screenshot(path=str(SCREENSHOTS / "shared-overview.png"), caret="initial")
    row.locator("button", has_text="Revoke").click()
    row.wait_for(state="detached")
    assert owner.errors == []
    owner.context.close()
    reader = _page(browser, server, "ann")
    assert (
        reader.locator("#shared-with-me .empty-list").inner_text() == "Nothing is shared with you."
    )
    assert reader.goto(f"/shared/{conversation}").status == 404
    reader.context.close()
