"""The admins' groups page (/admin/groups) in real headless Chromium against an in-process
server: create a group (a refused name first), add a member and give a collection, after
which that member finds the collection in search with their own key; rows from sign-in
and from settings are marked so and say that removing them lasts until the next sign-in;
take a collection away, remove a member, delete the group in the app's own dialog. Staff
cannot open the page."""

# ruff: noqa: F811 - pytest fixtures are imported from tests.desktop_kit
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_PASSWORD
from tests.desktop_kit import SignedInServer, server  # noqa: F401
from tests.server import sign_in
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture
from tests.test_browser_ui import watched_page

pytestmark = [pytest.mark.browser]

SHOTS = Path("/tmp/ragdesk-admin-ui")
SECRET = b"# Release train\n\nThe release train leaves every second Tuesday at noon."


@pytest.fixture
def page(browser: Any, server: SignedInServer) -> Iterator[Any]:
    with watched_page(browser, server) as (page, errors):
        yield page
        assert errors == [], errors


@pytest.fixture(scope="module")
def ann(server: SignedInServer) -> dict[str, str]:
    """A staff user with a key of her own, and a collection she is not a member of."""
    services = server.app.state.services
    user = services.auth.users.create("ann", TEST_PASSWORD, role="staff")
    services.auth.users.create("bob", TEST_PASSWORD, role="staff")
    key, _ = services.auth.keys.create(user, name="ann")
    services.store.ensure_collection("engineering")
    created = httpx.post(
        f"{server.url}/api/documents?collection=engineering",
        files=[("file", ("train.md", SECRET))],
        headers=server.headers,
    )
    document_id = created.json()["documents"][0]["id"]
    deadline = time.monotonic() + 30
    while server.get(f"/api/documents/{document_id}").json()["status"] != "indexed":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return {"Authorization": f"Bearer {key}"}


def finds_the_train(server: SignedInServer, headers: dict[str, str]) -> bool:
    found = httpx.post(
        f"{server.url}/api/search", json={"query": "when does the release train leave"},
        headers=headers,
    )  # fmt: skip
    assert found.status_code == 200, found.text
    return any("release train" in hit["text"] for hit in found.json()["hits"])


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True, caret="initial")


def test_a_group_gives_its_member_a_collection(
    page: Any, server: SignedInServer, ann: dict[str, str]
) -> None:
    assert not finds_the_train(server, ann)
    page.goto("/admin")
    page.click("a[href='/admin/groups']")
    page.wait_for_url("**/admin/groups")
    assert page.locator("#no-groups").is_visible()

    page.fill("#group-name", "eng team!")  # refused, with the reason the API gives
    page.click("#group-form button[type=submit]")
    page.locator("#group-error").wait_for()
    assert "a group name is" in page.locator("#group-error").inner_text()
    page.fill("#group-name", "engineers")
    page.click("#group-form button[type=submit]")
    page.locator("#group-created").wait_for()
    card = page.locator(".group-card[data-group='engineers']")

    card.locator(".add-member select").select_option("ann")
    card.locator(".add-member button").click()
    card.locator(".group-member[data-user='ann']").wait_for()
    assert "added here" in card.locator(".group-member[data-user='ann']").inner_text()
    assert card.locator(".add-member option[value='ann']").count() == 0  # a member already

    card.locator(".add-collection select[name=collection]").select_option("engineering")
    card.locator(".add-collection select[name=access]").select_option("reader")
    card.locator(".add-collection button").click()
    granted = card.locator(".group-collection[data-collection='engineering']")
    granted.wait_for()
    assert "reader" in granted.inner_text()
    assert finds_the_train(server, ann)  # at once, with the key she already had

    # Rows from sign-in and from settings are marked, and removing one says it comes back.
    services = server.app.state.services
    group = services.auth.groups.by_name("engineers")
    bob = services.auth.users.by_name("bob")
    services.auth.groups.add_member(group.id, bob.id, source="oidc")
    default = next(c for c in services.store.collections() if c.name == "default")
    with services.db.write() as db:
        db.execute(
            "INSERT INTO group_collections (group_id, collection_id, can_write, source)"
            " VALUES (?, ?, 1, 'settings')",
            [group.id, default.id],
        )
    page.reload()
    bob_row = card.locator(".group-member[data-user='bob']")
    assert "from sign-in" in bob_row.inner_text()
    settings_row = card.locator(".group-collection[data-collection='default']")
    assert "from settings" in settings_row.inner_text()
    assert "writer" in settings_row.inner_text()
    assert "until the user's next sign-in" in page.locator("#sign-in-note").inner_text()
    shot(page, "groups")
    page.emulate_media(color_scheme="dark")
    shot(page, "groups-dark")
    page.emulate_media(color_scheme="light")

    bob_row.locator("button").click()
    dialog = page.locator("#confirm-dialog")
    dialog.wait_for(state="visible")
    assert "next sign-in adds them back" in dialog.inner_text()
    page.click("#confirm-ok")
    bob_row.wait_for(state="detached")

    granted.locator("button").click()  # taken away: at once
    granted.wait_for(state="detached")
    assert not finds_the_train(server, ann)
    card.locator(".group-member[data-user='ann'] button").click()
    card.locator(".group-member[data-user='ann']").wait_for(state="detached")

    card.locator(".delete-group").click()
    dialog.wait_for(state="visible")
    page.click("#confirm-ok")
    page.locator("#group-deleted").wait_for()
    assert page.locator(".group-card").count() == 0
    assert services.auth.groups.by_name("engineers") is None


def test_staff_cannot_open_the_groups_page(
    browser: Any, server: SignedInServer, ann: dict[str, str]
) -> None:
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    try:
        sign_in(page, "ann", TEST_PASSWORD)
        assert page.goto("/admin/groups").status == 403
        assert page.goto("/admin/sources").status == 403
        assert 'href="/admin/groups"' not in page.goto("/").text()
    finally:
        context.close()
    refused = httpx.post(f"{server.url}/admin/groups", data={"name": "x"}, headers=ann)
    assert refused.status_code == 403
