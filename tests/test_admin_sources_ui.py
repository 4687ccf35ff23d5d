"""The admins' synced-sources page (/admin/sources) in real headless Chromium against an
in-process server: create a directory source (a refused one first, with its reason), sync
it from the page and watch the row until the run ends, read its runs and files, see the
documents in their collection and in search, "already syncing", and delete it through
the app's own confirmation dialog. Staff cannot open the page."""

# ruff: noqa: F811 - pytest fixtures are imported from tests.desktop_kit
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.desktop_kit import SignedInServer
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture
from tests.test_browser_ui import watched_page

pytestmark = [pytest.mark.browser]

SHOTS = Path("/tmp/ragdesk-admin-ui")
FILES = {
    "vacation.md": "# Vacation\n\nStaff take vacation days after asking their manager in writing.",
    "expenses.md": "# Expenses\n\nReceipts for expenses are filed within thirty days of travel.",
    "guides/onboarding.md": "# Onboarding\n\nNew hires get a laptop and a mentor on day one.",
    "tools.bin": "\x00\x01 not a document",
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("roots")
    for name, text in FILES.items():
        (root / "handbook" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "handbook" / name).write_text(text)
    (tmp_path_factory.mktemp("elsewhere") / "outside").mkdir()
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, roots: Path) -> Iterator[SignedInServer]:
    saved = os.environ.get("RAGDESK_SOURCE_ROOTS")
    os.environ["RAGDESK_SOURCE_ROOTS"] = json.dumps([str(roots)])
    try:
        running = SignedInServer(tmp_path_factory.mktemp("sources") / "data").start().provision()
    finally:
        if saved is None:
            del os.environ["RAGDESK_SOURCE_ROOTS"]
        else:
            os.environ["RAGDESK_SOURCE_ROOTS"] = saved
    running.app.state.services.store.ensure_collection("handbook")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def page(browser: Any, server: SignedInServer) -> Iterator[Any]:
    with watched_page(browser, server) as (page, errors):
        yield page
        assert errors == [], errors


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True, caret="initial")


def hits(server: SignedInServer, query: str) -> list[str]:
    found = httpx.post(f"{server.url}/api/search", json={"query": query}, headers=server.headers)
    return [hit["text"] for hit in found.json()["hits"]]


def wait_for(check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_an_admin_creates_syncs_inspects_and_deletes_a_directory_source(
    page: Any, server: SignedInServer, roots: Path
) -> None:
    page.goto("/admin")
    page.click("a[href='/admin/sources']")
    page.wait_for_url("**/admin/sources")
    assert page.locator("#no-sources").is_visible()

    # Refused: the reason the API gives, in the page, with the form kept as filled.
    page.fill("#source-name", "handbook")
    page.select_option("#source-collection", "handbook")
    page.fill("#source-path", str(roots.parent / "elsewhere"))
    page.click("#source-form button[type=submit]")
    error = page.locator("#source-error")
    error.wait_for()
    assert "not under a directory of RAGDESK_SOURCE_ROOTS" in error.inner_text()
    assert page.input_value("#source-name") == "handbook"
    assert page.locator("#sources-table").count() == 0

    # The S3 fields show only for an S3 source.
    assert not page.locator("#source-bucket").is_visible()
    page.select_option("#source-kind", "s3")
    assert page.locator("#source-bucket").is_visible()
    assert not page.locator("#source-path").is_visible()
    page.select_option("#source-kind", "directory")

    page.fill("#source-path", str(roots / "handbook"))
    page.fill("#source-interval", "3600")
    page.click("#source-form button[type=submit]")
    page.locator("#source-created").wait_for()
    row = page.locator(".source-row").first
    assert "handbook" in row.locator(".source-name").inner_text()
    assert "every 1 h" in row.inner_text()
    assert "never synced" in row.inner_text()
    shot(page, "sources-created")

    # Sync now: the row polls its run until it ends, then shows the counts.
    row.locator(".sync-now").click()
    page.wait_for_function(
        "() => document.querySelector('.source-row .run-status')?.textContent === 'done'",
        timeout=30_000,
    )
    row = page.locator(".source-row").first
    assert row.get_attribute("data-syncing") == "false"
    counts = row.locator(".run-counts").inner_text()
    assert "3 added" in counts and "1 skipped" in counts, counts
    assert row.locator(".source-files").inner_text() == "3"

    # Its runs (with the skipped file's reason) and files.
    row.locator(".show-history").click()
    history = page.locator("#source-history")
    history.locator(".run-row").first.wait_for()
    run = history.locator(".run-row").first.inner_text()
    assert "done" in run and "tools.bin" in run and "skipped" in run, run
    paths = history.locator(".file-row code").all_inner_texts()
    assert paths == ["expenses.md", "guides/onboarding.md", "vacation.md"]
    shot(page, "sources-synced")
    page.emulate_media(color_scheme="dark")
    shot(page, "sources-synced-dark")
    page.emulate_media(color_scheme="light")
    # On a phone the page stays as wide as the window: the tables scroll in their boxes.
    viewport = page.viewport_size
    page.set_viewport_size({"width": 390, "height": 800})
    wider = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    culprits = page.evaluate(  # what sticks out, outside the scrolling tab bar
        "() => [...document.querySelectorAll('body *')].filter(e => !e.closest('nav')"
        " && e.getBoundingClientRect().right > window.innerWidth + 1).slice(0, 12)"
        ".map(e => `${e.tagName}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`)"
    )
    assert wider == 0, f"/admin/sources is {wider} px wider than a 390 px phone: {culprits}"
    shot(page, "sources-synced-narrow")
    page.set_viewport_size(viewport)

    # The documents are in the collection and in search.
    collection = next(
        c for c in server.app.state.services.store.collections() if c.name == "handbook"
    )
    page.goto(f"/collections/{collection.id}")
    for name in ("expenses.md", "onboarding.md", "vacation.md"):
        page.get_by_text(name).first.wait_for()
    wait_for(lambda: any("vacation days" in t for t in hits(server, "vacation days manager")))

    # A sync while one runs: "already syncing", and the row follows that run to its end.
    page.goto("/admin/sources")
    source_id = int(page.locator(".source-row").first.get_attribute("id").split("-")[1])
    scheduler = server.app.state.sources
    claim = scheduler._claim(source_id)  # as a sync of it running would hold it
    assert claim is not None
    try:
        page.locator(".source-row .sync-now").click()
        page.locator(".source-row .run-note").wait_for()
        assert page.locator(".source-row .run-note").inner_text() == "already syncing"
        assert page.locator(".source-row").get_attribute("data-syncing") == "true"
    finally:
        claim.close()
    page.wait_for_function(
        "() => document.querySelector('.source-row')?.dataset.syncing === 'false'"
    )

    # A form post without the session's CSRF token is refused.
    forged = page.request.post("/admin/sources", form={"name": "forged", "kind": "directory"})
    assert forged.status == 403
    assert server.app.state.sources.store.by_name("forged") is None

    # Delete, in the app's own dialog that says the synced documents leave search.
    page.locator(".source-row .delete-source").click()
    dialog = page.locator("#confirm-dialog")
    dialog.wait_for(state="visible")
    assert "leave search" in dialog.inner_text()
    page.click("#confirm-ok")
    page.locator("#source-deleted").wait_for()
    assert page.locator(".source-row").count() == 0
    wait_for(lambda: not any("vacation days" in t for t in hits(server, "vacation days manager")))


def test_staff_cannot_open_the_sources_page(browser: Any, server: SignedInServer) -> None:
    from tests.conftest import TEST_PASSWORD
    from tests.server import sign_in

    server.app.state.services.auth.users.create("sam", TEST_PASSWORD, role="staff")
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    try:
        sign_in(page, "sam", TEST_PASSWORD)
        assert page.goto("/admin/sources").status == 403
        assert page.request.post("/admin/sources/1/sync").status in (403, 404)
        assert httpx.get(f"{server.url}/admin/sources", headers=server.headers).status_code == 200
    finally:
        context.close()
