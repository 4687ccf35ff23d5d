"""The admins' usage page (/admin/usage) in real headless Chromium: reached from the admin
sections, totals and both charts drawn as SVG, breakdowns as bars, content gaps loaded
after the page with paraphrases together; at 1280 px and at 390 px (nothing wider than
the phone but the tables, which scroll in place), in the light and the dark theme."""

# ruff: noqa: F811 - pytest fixtures are imported from tests.desktop_kit
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.chat.answering import NOTHING_FOUND, WITHHELD
from app.chat.finished import FinishedAnswer
from app.usage.events import Asker, UsageRecorder
from llm.params import Usage
from tests.desktop_kit import SignedInServer, page, server  # noqa: F401
from tests.test_browser import browser  # noqa: F401 - the shared Chromium fixture

pytestmark = [pytest.mark.browser]

SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
SHOTS = Path("/tmp/ragdesk-admin-ui")
DAY = 86_400.0
UNANSWERED = (
    "How do I reset my VPN password?", "how do I reset my vpn password",
    "What is the parking fee for visitors?", "Is there a gym in the building?",
)  # fmt: skip


def a_month_of_usage(server: SignedInServer) -> None:
    """Thirty days of questions by three staff (one of them through an API key), and one
    real answer through the API, so the page has something to draw."""
    services = server.app.state.services
    auth = services.auth
    people = [
        auth.users.create(name, "correct horse battery staple") for name in ("ann", "bob", "cy")
    ]
    team = auth.groups.create("support")
    auth.groups.add_member(team.id, people[0].id, source="local")
    recorder = UsageRecorder(services.db)
    now = time.time()
    for day in range(30):
        for n in range(3 + day % 7):
            who = people[n % 3]
            asker = Asker(who.id, 1 if n % 3 == 2 else None, "api" if n % 3 == 2 else "web")
            answer = "Lunch is at noon [1]."
            if n == 4:
                answer = NOTHING_FOUND
            elif n == 5:
                answer = WITHHELD
            question = UNANSWERED[(day + n) % len(UNANSWERED)] if n in (4, 5) else "lunch?"
            finished = FinishedAnswer(
                question, answer, "gemma-3-270m" if n % 2 else "qwen2.5-1.5b",
                0.2 + 0.1 * n, 1.5 + 0.3 * day % 4, Usage(400 + n, 0, 60),
            )  # fmt: skip
            recorder.record(asker, finished, at=now - day * DAY - n * 60)
    response = httpx.post(
        f"{server.url}/api/chat", json={"message": "How do I upload documents?"},
        headers=server.headers, timeout=60,
    )  # fmt: skip
    assert response.status_code == 200


def shot(page: Any, name: str, *, docs: bool = False) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True, caret="initial")
    if docs:
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=False, caret="initial")


def test_the_usage_page_at_desktop_and_phone_width(page: Any, server: SignedInServer) -> None:
    a_month_of_usage(server)
    page.goto("/admin")
    page.click("a[href='/admin/usage']")
    page.wait_for_url("**/admin/usage")
    assert page.locator(".admin-nav a[aria-current=page]").inner_text() == "Usage"
    totals = page.locator("#usage-totals").inner_text()
    assert "Questions" in totals and "Withheld" in totals
    assert page.locator("#usage-questions-chart rect.seg-answered").count() >= 30
    assert page.locator("#usage-latency-chart polyline.line-ttft").get_attribute("points")
    assert page.locator("#usage-by-user tbody tr").count() >= 3
    assert page.locator("#usage-by-group tr[data-key] .usage-label").inner_text() == "support"
    gaps = page.locator("#gap-list .gap")
    gaps.first.wait_for()
    vpn = gaps.filter(has_text="VPN")
    assert vpn.count() == 1  # both wordings in one group
    assert "reset my vpn password" in vpn.inner_text().lower()
    assert page.locator("#usage-csv").get_attribute("href").startswith("/api/usage.csv?period=30d")
    page.select_option("#usage-bucket", "week")
    page.click("#usage-period button[type=submit]")
    page.wait_for_url("**bucket=week**")
    page.locator("#gap-list").wait_for()
    page.select_option("#usage-bucket", "day")
    page.click("#usage-period button[type=submit]")
    page.locator("#gap-list").wait_for()
    page.set_viewport_size({"width": 1280, "height": 900})
    shot(page, "usage", docs=True)
    page.emulate_media(color_scheme="dark")
    shot(page, "usage-dark")
    scrolled(page, "#usage-by-group", "usage-dark-tables")
    page.emulate_media(color_scheme="light")

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    page.locator("#gap-list").wait_for()
    width = page.evaluate("document.querySelector('#admin-main').scrollWidth")
    assert width <= 390, width  # the page fits the phone; wide tables scroll inside
    chart = page.locator("#usage-questions-chart svg").bounding_box()
    assert chart is not None and 300 <= chart["width"] <= 390
    shot(page, "usage-narrow", docs=True)
    scrolled(page, "#usage-questions-chart", "usage-narrow-charts")
    scrolled(page, "#usage-by-user", "usage-narrow-tables")
    scrolled(page, "#usage-gaps", "usage-narrow-gaps")
    page.emulate_media(color_scheme="dark")
    scrolled(page, "#usage-page", "usage-narrow-dark")
    scrolled(page, "#usage-questions-chart", "usage-narrow-dark-charts")
    page.emulate_media(color_scheme="light")


def scrolled(page: Any, selector: str, name: str) -> None:
    """The page scrolled to ``selector`` (the window's main pane scrolls, not the page)."""
    page.locator(selector).scroll_into_view_if_needed()
    page.evaluate(
        "s => { const el = document.querySelector(s);"
        " document.querySelector('#admin-main').scrollTop = el.offsetTop - 8; }",
        selector,
    )
    shot(page, name)
