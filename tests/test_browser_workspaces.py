"""Collections as workspaces in real headless Chromium: an admin creates a collection from
the sidebar, renames it and gives it instructions on its settings page, then deletes it
after confirming; the page fits the window at 1280 and 390 px."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_PASSWORD
from tests.server import sign_in
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture
from tests.test_browser_ui import InProcessServer

pytestmark = [pytest.mark.browser]
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    running = InProcessServer(tmp_path_factory.mktemp("workspaces") / "data").start()
    services = running.app.state.services
    services.auth.users.create("boss", TEST_PASSWORD, role="admin")
    for name in ("kim", "lee"):
        services.auth.users.create(name, TEST_PASSWORD, role="staff")
    services.auth.groups.create("legal-team")
    try:
        yield running
    finally:
        running.stop()


def _page(browser: Any, server: InProcessServer, width: int) -> tuple[Any, list[str]]:  # noqa: F811
    context = browser.new_context(base_url=server.url, viewport={"width": width, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    sign_in(page, "boss", TEST_PASSWORD)
    return page, errors


def test_an_admin_creates_renames_and_deletes_a_collection(
    browser: Any,  # noqa: F811
    server: InProcessServer,
) -> None:
    services = server.app.state.services
    page, errors = _page(browser, server, 1280)
    page.goto("/")
    page.click("#new-collection-button")
    dialog = page.locator("#new-collection-dialog")
    dialog.get_by_label("Name").fill("Contracts")
    dialog.get_by_label("Description").fill("Signed agreements")
    dialog.get_by_role("button", name="Create collection").click()
    page.wait_for_url("**/collections/*/settings")
    collection_id = int(page.url.split("/")[-2])
    assert page.locator(".workspace-head h1").inner_text() == "Contracts"

    # A name in use (in another case) is refused in the dialog, which keeps what was typed.
    page.goto("/")
    page.click("#new-collection-button")
    dialog.get_by_label("Name").fill("CONTRACTS")
    dialog.get_by_role("button", name="Create collection").click()
    dialog.locator(".form-error").wait_for()
    assert "exists already" in dialog.locator(".form-error").inner_text()
    assert dialog.get_by_label("Name").input_value() == "CONTRACTS"

    page.goto(f"/collections/{collection_id}/settings")
    general = page.locator("form.workspace-form")
    general.get_by_label("Name").fill("Legal contracts")
    general.get_by_label("Instructions for the model").fill(
        "Answer formally and name the clause you rely on."
    )
    general.get_by_label("OCR of scanned PDFs").select_option("on")
    general.get_by_role("button", name="Save").click()
    page.locator("#collection-settings .notice[role=status]").wait_for()
    assert page.locator(".workspace-head h1").inner_text() == "Legal contracts"
    members = page.locator("section[aria-labelledby=ws-members] form")
    members.get_by_label("User").select_option("kim")
    members.get_by_label("As").select_option("writer")
    members.get_by_role("button", name="Add member").click()
    page.locator('[data-member="kim"]').wait_for()
    groups = page.locator("section[aria-labelledby=ws-groups] form")
    groups.get_by_role("button", name="Give access").click()
    page.locator('[data-group="legal-team"]').wait_for()
    saved = services.db.read().execute(
        "SELECT name, instructions, ocr FROM collections WHERE id = ?", [collection_id]
    )
    assert tuple(saved.fetchone()) == (
        "Legal contracts",
        "Answer formally and name the clause you rely on.",
        1,
    )

    shots = ((1280, 1500, "collection-settings.png"), (390, 1900, "narrow-collection-settings.png"))
    for width, height, name in shots:  # tall enough to show the whole page
        page.set_viewport_size({"width": width, "height": height})
        page.reload()
        page.locator(".workspace-head h1").wait_for()
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(SCREENSHOTS / name), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})

    # Deleting asks in the app's dialog and needs the name typed.
    danger = page.locator("section.workspace-danger form")
    danger.get_by_label("Type Legal contracts to confirm").fill("Legal contracts")
    danger.get_by_role("button", name="Delete collection").click()
    confirm = page.locator("#confirm-dialog")
    confirm.wait_for()
    assert "cannot be undone" in confirm.inner_text()
    page.click("#confirm-ok")
    page.wait_for_url("**/admin")
    deadline = time.monotonic() + 5
    while any(c.id == collection_id for c in services.store.collections()):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert "Legal contracts" not in page.locator("main").inner_text()
    assert errors == [], errors
    page.context.close()
