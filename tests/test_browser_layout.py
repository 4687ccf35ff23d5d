"""Pages hold their layout at a phone's, a small laptop's and a desktop's width: nothing is
wider than the window, and a header's title and description read whole."""

# ruff: noqa: F811 - pytest fixtures are imported from tests.desktop_kit
from __future__ import annotations

from typing import Any

import pytest

from retrieval.collections import Workspaces
from tests.desktop_kit import SignedInServer, server  # noqa: F401 - shared fixtures
from tests.test_browser import SCREENSHOTS, browser  # noqa: F401 - the shared Chromium fixture
from tests.test_browser_ui import watched_page

pytestmark = pytest.mark.browser

WIDTHS = (390, 1024, 1280)
DESCRIPTION = (
    "Policies, forms and guides for everyone at the company: leave, travel, expenses, "
    "the offices and what to do in an emergency."
)


def _overflow(page: Any) -> int:
    """How many pixels the page is wider than its window (0: none)."""
    return int(page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))


@pytest.mark.parametrize("width", WIDTHS)
def test_the_documents_page_and_sources_admin_fit_the_window(
    browser: Any, server: SignedInServer, width: int
) -> None:
    services = server.app.state.services
    collection = services.collection_id
    Workspaces(services.db).describe(collection, description=DESCRIPTION)
    with watched_page(browser, server) as (page, errors):
        page.set_viewport_size({"width": width, "height": 800})
        page.goto(f"/collections/{collection}")
        title = page.locator(".collection-view .conversation-title")
        assert _overflow(page) == 0
        assert title.evaluate("e => e.scrollWidth <= e.clientWidth"), "the title is cut"
        description = page.locator(".collection-description")
        if width > 390:  # on a phone the description may take a few lines more
            lines = description.evaluate(
                "e => Math.round(e.getBoundingClientRect().height / "
                "parseFloat(getComputedStyle(e).lineHeight))"
            )
            assert lines <= 4, f"the description takes {lines} lines at {width} px"
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"documents-{width}.png"))
        page.goto("/admin/sources")
        assert _overflow(page) == 0
        page.screenshot(path=str(SCREENSHOTS / f"admin-sources-{width}.png"))
        assert errors == [], errors
