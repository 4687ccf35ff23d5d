"""The desktop shell in real headless Chromium: resizable panes that persist, 1024 px to
4K, keyboard-only use, the status bar, an axe-core accessibility check, screenshots."""

# ruff: noqa: F811 - pytest fixtures are imported from tests.desktop_kit
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_PASSWORD, TEST_USER
from tests.desktop_kit import SignedInServer, answered, page, server, width  # noqa: F401
from tests.server import sign_in
from tests.test_browser import SCREENSHOTS, browser  # noqa: F401 - the shared Chromium fixture

pytestmark = [pytest.mark.browser]

AXE = Path(__file__).parent / "vendor" / "axe-core-4.14.1.min.js"


def test_panes_resize_by_mouse_and_keyboard_and_persist(page: Any) -> None:
    page.goto("/")
    before = width(page, "#sidebar")
    box = page.locator("#sidebar-splitter").bounding_box()
    page.mouse.move(box["x"] + 2, box["y"] + 200)
    page.mouse.down()
    page.mouse.move(box["x"] + 62, box["y"] + 200, steps=5)
    page.mouse.move(box["x"] + 102, box["y"] + 200, steps=5)
    page.mouse.up()
    after = width(page, "#sidebar")
    assert abs(after - (before + 100)) <= 2, (before, after)

    inspector = width(page, "#inspector")
    page.locator("#inspector-splitter").focus()
    page.keyboard.press("ArrowLeft")  # the divider moves left: the inspector grows
    page.keyboard.press("ArrowLeft")
    assert abs(width(page, "#inspector") - (inspector + 40)) <= 2
    assert page.locator("#inspector-splitter").get_attribute("aria-valuenow") == str(
        round(inspector + 40)
    )

    page.reload()
    assert abs(width(page, "#sidebar") - after) <= 2
    assert abs(width(page, "#inspector") - (inspector + 40)) <= 2

    page.keyboard.press("b")  # hide the sidebar; it stays hidden after a reload
    assert not page.locator("#sidebar").is_visible()
    page.reload()
    assert not page.locator("#sidebar").is_visible()
    page.click("#menu-view")
    page.click("[data-toggle-pane=sidebar]")
    assert page.locator("#sidebar").is_visible()
    page.evaluate("localStorage.clear()")


@pytest.mark.parametrize("viewport", [(1024, 700), (3840, 2160)])
def test_the_window_fills_the_viewport_from_1024_to_4k(
    browser: Any,
    server: SignedInServer,
    viewport: tuple[int, int],
) -> None:
    context = browser.new_context(
        viewport={"width": viewport[0], "height": viewport[1]}, base_url=server.url
    )
    page = context.new_page()
    sign_in(page, TEST_USER, TEST_PASSWORD)
    page.goto("/")
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport[0]
    window = page.locator("#window").bounding_box()
    assert (window["width"], window["height"]) == viewport
    assert width(page, "#center") >= 360
    page.evaluate(  # panes stored wide on a big screen still leave the chat its room here
        "() => { localStorage.setItem('ragdesk.sidebarWidth', '600');"
        " localStorage.setItem('ragdesk.inspectorWidth', '700'); }"
    )
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport[0]
    assert width(page, "#center") >= 360
    for pane in ("#sidebar", "#inspector", "#statusbar", ".menubar"):
        assert page.locator(pane).is_visible(), pane
    context.close()


def test_keyboard_only_navigation(page: Any, server: SignedInServer) -> None:
    for question in ("First keyboard question?", "Second keyboard question?"):
        page.goto("/")
        answered(page, f"How do I upload? {question}")
    page.goto("/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "menu-file"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none", "the focus is visible"

    page.keyboard.press("ArrowDown")  # opens the File menu on its first item
    assert page.locator("#menu-file-items").is_visible()
    assert page.evaluate("document.activeElement.textContent").startswith("New chat")
    page.keyboard.press("ArrowRight")  # the View menu
    assert page.locator("#menu-view-items").is_visible()
    assert not page.locator("#menu-file-items").is_visible()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")  # Inspector: hide it
    assert not page.locator("#inspector").is_visible()
    page.keyboard.press("i")
    assert page.locator("#inspector").is_visible()
    page.locator("#menu-help").focus()
    page.keyboard.press("Enter")
    assert page.locator("#menu-help-items").is_visible()
    page.keyboard.press("Escape")
    assert not page.locator("#menu-help-items").is_visible()
    assert page.evaluate("document.activeElement.id") == "menu-help"

    page.locator("#menu-help").blur()
    page.keyboard.press("j")  # the first conversation of the list, then the next one
    page.wait_for_url("**/c/*")
    first = page.url
    page.keyboard.press("j")
    page.wait_for_url(lambda u: u != first)
    assert page.locator("#conversation-list a[aria-current=page]").count() == 1
    page.keyboard.press("k")
    page.wait_for_url(first)

    page.keyboard.press("?")
    help_text = page.locator("#help-dialog").inner_text()
    assert "Next · previous conversation" in help_text
    page.keyboard.press("Escape")

    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "question"
    page.keyboard.press("Shift+Tab")  # back to the conversation's last answer's actions
    assert page.evaluate("document.activeElement.tagName") in ("BUTTON", "A")

    page.locator("#pin-button").focus()  # a control the response replaces keeps the focus
    page.keyboard.press("Enter")
    page.wait_for_selector("#pin-button[aria-pressed=true]")
    page.wait_for_function("() => document.activeElement.id === 'pin-button'")
    page.keyboard.press("Enter")
    page.wait_for_selector("#pin-button[aria-pressed=false]")

    page.goto("/collections/1")
    page.locator("#sort-name").focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("th.col-name[aria-sort=ascending]")
    page.wait_for_function("() => document.activeElement.id === 'sort-name'")


def axe_violations(page: Any, *, every_impact: bool = False) -> list[dict[str, Any]]:
    """axe-core's serious and critical findings (all of them with ``every_impact``)."""
    # add_script_tag(path=…) would inline the script, which the page's CSP refuses; served
    # by Playwright at a same-origin URL it loads under the real policy, and never by the app.
    page.route(
        "**/__test__/axe.js",
        lambda route: route.fulfill(path=str(AXE), content_type="application/javascript"),
    )
    page.add_script_tag(url="/__test__/axe.js")
    result = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:3]}
        for v in result["violations"]
        if every_impact or v["impact"] in ("serious", "critical")
    ]


def test_axe_finds_no_serious_violations(page: Any, server: SignedInServer) -> None:
    server.model.enqueue(["To upload:\n\n", "1. Open **Upload documents…** [1]\n"])
    page.goto("/")
    answered(page, "How do I upload files, accessibly?")
    page.locator("article.msg.assistant .sources-button").last.click()
    page.locator("#sources-pane .source").first.wait_for()
    checks = {}
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        checks[f"chat-{scheme}"] = axe_violations(page, every_impact=True)
        page.click("#menu-file")
        checks[f"menu-{scheme}"] = axe_violations(page)
        page.keyboard.press("Escape")
        page.keyboard.press("?")
        checks[f"help-{scheme}"] = axe_violations(page)
        page.keyboard.press("Escape")
        page.click("#rename-button")
        checks[f"rename-{scheme}"] = axe_violations(page)
        page.keyboard.press("Escape")
        page.keyboard.press("u")
        checks[f"upload-{scheme}"] = axe_violations(page)
        page.keyboard.press("Escape")
    page.goto("/collections/1")
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        checks[f"collection-{scheme}"] = axe_violations(page, every_impact=True)
    page.emulate_media(color_scheme="light")
    page.goto("/")
    checks["empty"] = axe_violations(page)
    found = {name: violations for name, violations in checks.items() if violations}
    assert found == {}, json.dumps(found, indent=1)


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[SignedInServer]:
    """A server of its own, so screenshots never show what other tests left behind."""
    running = SignedInServer(tmp_path / "data").start().provision()
    running.upload("up.md", b"# Upload\n\nOpen Upload documents and drop the files to upload them.")
    try:
        yield running
    finally:
        running.stop()


def test_screenshots_of_the_main_screens(browser: Any, fresh: SignedInServer) -> None:
    """docs/screenshots/desktop-*.png, light and dark, 1280 and 390 px wide (README shows
    them)."""
    server = fresh
    context = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=server.url)
    page = context.new_page()
    page.emulate_media(color_scheme="light")
    sign_in(page, TEST_USER, TEST_PASSWORD)
    server.upload("travel-policy.md", b"# Travel policy\n\nMeals abroad: 45 euros a day.\n" * 30)
    server.upload("canteen.csv", b"day,opens\nMonday,12:00\nFriday,11:30\n")
    server.upload("it-handbook.html", b"<h1>IT handbook</h1><p>Reset your password.</p>" * 20)
    model = server.model
    asked = [
        ("How much are meals abroad a day?", "Meals abroad: 45 euros a day [1]."),
        ("How do I reset my password?", "Reset your password as the IT handbook says [1]."),
    ]
    for question, answer in asked:
        model.enqueue([answer])
        page.goto("/")
        answered(page, question, answer[:12])
    db = server.app.state.services.db
    with db.write() as write:  # spread the history over a few days, as in real use
        write.execute("UPDATE conversations SET updated_at = updated_at - 86400 WHERE id = 2")
        write.execute("UPDATE conversations SET updated_at = updated_at - 864000 WHERE id = 1")
    page.goto("/")
    model.enqueue(
        [
            "To upload documents:\n\n",
            "1. Choose **Upload documents…** in the File menu [1]\n",
            "2. Drop the files; each shows its status until it is *indexed* [1]\n\n",
            "Or from a shell:\n\n```\ncurl -F file=@handbook.pdf http://127.0.0.1:8000/api/documents\n```\n",
        ]
    )
    answer = answered(page, "How do I upload documents?", "To upload documents")
    page.click("#pin-button")
    page.wait_for_selector("#conversation-list .group-label >> text=Pinned")
    answer.locator("a.cite").first.click()
    page.locator("#passage-view mark#passage").wait_for()
    page.locator("#sources-pane .source.selected").wait_for()
    page.locator("#question").blur()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for scheme in ("light", "dark"):
        suffix = "" if scheme == "light" else "-dark"
        page.emulate_media(color_scheme=scheme)
        page.screenshot(path=str(SCREENSHOTS / f"desktop-chat{suffix}.png"))
    page.emulate_media(color_scheme="light")
    page.click("#menu-view")
    page.screenshot(path=str(SCREENSHOTS / "desktop-menu.png"))
    page.keyboard.press("Escape")
    page.goto("/collections/1?sort=name&order=asc")
    for scheme in ("light", "dark"):
        suffix = "" if scheme == "light" else "-dark"
        page.emulate_media(color_scheme=scheme)
        page.screenshot(path=str(SCREENSHOTS / f"desktop-documents{suffix}.png"))
    # No drawer animation: resized, the drawers would otherwise be caught sliding away.
    page.emulate_media(reduced_motion="reduce")
    page.set_viewport_size({"width": 390, "height": 844})  # a phone: drawers, one column
    for scheme in ("light", "dark"):
        suffix = "" if scheme == "light" else "-dark"
        page.emulate_media(color_scheme=scheme)
        page.screenshot(path=str(SCREENSHOTS / f"narrow-documents{suffix}.png"))
    page.emulate_media(color_scheme="light")
    page.goto("/c/3")
    for scheme in ("light", "dark"):
        suffix = "" if scheme == "light" else "-dark"
        page.emulate_media(color_scheme=scheme)
        page.screenshot(path=str(SCREENSHOTS / f"narrow-chat{suffix}.png"))
    page.emulate_media(color_scheme="light")
    page.locator("article.msg.assistant a.cite").first.click()
    page.locator("#passage-view mark#passage").wait_for()
    page.wait_for_function(
        "() => document.getElementById('inspector').getBoundingClientRect().right <= innerWidth"
    )
    page.screenshot(path=str(SCREENSHOTS / "narrow-passage.png"))
    page.keyboard.press("Escape")
    page.click("#sidebar-toggle")
    page.wait_for_function(
        "() => document.getElementById('sidebar').getBoundingClientRect().left >= 0"
    )
    page.screenshot(path=str(SCREENSHOTS / "narrow-sidebar.png"))
    context.close()


def test_status_bar_shows_the_model_index_and_connection(page: Any) -> None:
    page.goto("/")
    assert page.locator("#status-model").inner_text() == "Model fake on CPU"
    assert "passage" in page.locator("#status-index").inner_text()
    assert "waiting" in page.locator("#status-requests").inner_text()
    assert page.locator("#connection").get_attribute("data-state") == "online"
    page.route("**/ui/status", lambda route: route.abort())  # the server is unreachable
    page.wait_for_selector("#connection[data-state=offline]", timeout=10_000)
    assert "Offline" in page.locator("#connection").inner_text()
    page.unroute("**/ui/status")
    page.wait_for_selector("#connection[data-state=online]", timeout=10_000)
    page.console_errors.clear()  # the failed polls were logged, as they should be
