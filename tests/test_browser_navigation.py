"""In real headless Chromium: Previous/Next through an answer's citations in the source
viewer, and the status bar's upload badge that outlives the upload dialog."""

# ruff: noqa: F811 - pytest fixtures are imported from tests.desktop_kit
from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.desktop_kit import SignedInServer, answered, page, server  # noqa: F401
from tests.test_browser import SCREENSHOTS, browser  # noqa: F401 - the shared Chromium fixture

pytestmark = [pytest.mark.browser]

IN_VIEW = (
    "e => { const r = e.getBoundingClientRect(), p = e.closest('.page-text')"
    ".getBoundingClientRect(); return r.top >= p.top && r.bottom <= p.bottom; }"
)


def position(viewer: Any) -> str:
    return str(viewer.locator("#citation-position").inner_text())


def highlighted(viewer: Any) -> str:
    mark = viewer.locator("mark#passage")
    assert mark.evaluate(IN_VIEW), "the cited passage is scrolled into view"
    return str(mark.inner_text())


def test_next_and_previous_citation_in_the_viewer(page: Any, server: SignedInServer) -> None:
    filler = "Other matters of the office are written here at some length.\n\n" * 40
    for name, fact in (("holidays", "25 days"), ("sick", "tell HR"), ("bridge", "2 days")):
        text = f"# {name}\n\n{filler}Staff holidays: {fact} a year, the holidays policy."
        server.upload(f"{name}.md", text.encode())
    server.model.enqueue(["Holidays [1], sick days [2], bridge days [3]."])
    answer = answered(page, "What is the staff holidays policy?", "Holidays")
    cites = answer.locator("a.cite")
    assert cites.count() == 3
    cites.first.click()  # a citation opens the passage in the inspector
    with page.context.expect_page() as opened:
        page.click("#passage-open-full")  # "Open in full": the viewer in a new tab
    viewer = opened.value
    viewer.wait_for_load_state()
    assert position(viewer) == "Citation 1 of 3"
    assert not viewer.locator("#citation-prev").count()
    first = highlighted(viewer)
    viewer.keyboard.press("]")
    viewer.locator("#citation-position", has_text="Citation 2 of 3").wait_for()
    second = highlighted(viewer)
    assert second != first
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    viewer.screenshot(path=str(SCREENSHOTS / "document-citations.png"))
    viewer.click("#citation-next")
    viewer.locator("#citation-position", has_text="Citation 3 of 3").wait_for()
    assert not viewer.locator("#citation-next").count()
    highlighted(viewer)
    viewer.click("#citation-prev")
    viewer.locator("#citation-position", has_text="Citation 2 of 3").wait_for()
    viewer.keyboard.press("[")
    viewer.locator("#citation-position", has_text="Citation 1 of 3").wait_for()
    assert highlighted(viewer) == first
    viewer.keyboard.press("?")  # the shortcut overlay lists the keys
    assert "next citation" in viewer.locator("#help-dialog").inner_text()
    viewer.close()


class GatedEmbedder:
    """The real (fake) embedder, held until the test opens the gate: ingestion in progress."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.gate = inner, threading.Event()

    def embed_batch(self, texts: list[str]) -> Any:
        assert self.gate.wait(30)
        return self.inner.embed_batch(texts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_upload_badge_outlives_the_dialog(page: Any, server: SignedInServer, tmp_path: Any) -> None:
    worker = server.app.state.services.retrieval.worker
    gated = GatedEmbedder(worker.embedder)
    worker.embedder = gated
    try:
        files = []
        for n in (1, 2):
            path = tmp_path / f"memo-{n}.md"
            path.write_text(f"# Memo {n}\n\nBadge memo number {n}, still being embedded.")
            files.append(str(path))
        page.goto("/")
        badge = page.locator("#upload-badge")
        assert badge.is_hidden()
        page.keyboard.press("u")
        page.set_input_files("#upload-input", files)
        page.click("#upload-form button[type=submit]")
        page.locator("#upload-rows .upload-row").nth(1).wait_for()
        page.click("#upload-dialog [data-close-dialog]")
        assert not page.locator("#upload-dialog").is_visible()
        page.locator("#upload-badge", has_text="Processing 2").wait_for()
        page.wait_for_timeout(1500)  # the rows keep polling behind the closed dialog
        assert badge.inner_text() == "Processing 2"
        page.locator("#statusbar").screenshot(path=str(SCREENSHOTS / "upload-badge.png"))
        badge.click()  # reopens the dialog with the live list
        assert page.locator("#upload-dialog").is_visible()
        assert page.locator("#upload-rows .upload-row").count() == 2
        page.keyboard.press("Escape")
        gated.gate.set()
        page.locator("#upload-badge", has_text="Uploads done: 2 indexed").wait_for(timeout=15_000)
        assert badge.get_attribute("data-state") == "done"
        badge.wait_for(state="hidden", timeout=10_000)
        statuses = page.locator("#upload-rows .upload-row").evaluate_all(
            "rows => rows.map(r => r.dataset.status)"
        )
        assert statuses == ["indexed", "indexed"]
    finally:
        gated.gate.set()
        worker.embedder = gated.inner


def test_a_refused_upload_is_counted_as_refused_not_failed(
    page: Any, server: SignedInServer, tmp_path: Any
) -> None:
    """#26 item 8: a file refused at upload made the status bar say '1 failed'."""
    path = tmp_path / "setup.exe"
    path.write_bytes(b"MZ\x90\x00" + bytes(range(256)))
    page.goto("/")
    page.keyboard.press("u")
    page.set_input_files("#upload-input", [str(path)])
    page.click("#upload-form button[type=submit]")
    page.locator("#upload-badge", has_text="Uploads done: 1 refused").wait_for()
    assert "failed" not in page.locator("#upload-badge").inner_text()
