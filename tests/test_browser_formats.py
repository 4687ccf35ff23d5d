"""Every new format round-trips in the browser: files dropped on the upload dialog are
indexed, a question is answered with a citation, and the citation opens the right place:
the slide with its table's cited row marked, the sheet with the cited rows marked, the
message's attachment, the picture with the cited lines boxed."""

# ruff: noqa: F811 - pytest fixtures are imported from tests.desktop_kit
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from tests.desktop_kit import SignedInServer, page, server  # noqa: F401 - shared fixtures
from tests.scans import scanned_page
from tests.test_browser import SCREENSHOTS, browser  # noqa: F401 - the shared Chromium fixture
from tests.test_formats import _deck, _mail, _workbook

pytestmark = pytest.mark.browser

FILES = {
    "review.pptx": _deck,
    "permits.xlsx": _workbook,
    "lift.eml": _mail,
    "notice.png": lambda: _png(["Fire drill on Friday at ten.", "Meet at Gate C."]),
}


def _png(paragraphs: list[str]) -> bytes:
    buffer = io.BytesIO()
    scanned_page(paragraphs).save(buffer, format="PNG")
    return buffer.getvalue()


def _upload_through_the_dialog(page: Any, folder: Path) -> None:
    page.goto("/")
    page.keyboard.press("u")
    page.set_input_files("#upload-input", [str(folder / name) for name in FILES])
    page.click("#upload-form button[type=submit]")
    rows = page.locator("#upload-rows .upload-row")
    page.wait_for_function(
        f"() => [...document.querySelectorAll('.upload-row')].filter("
        f"r => r.dataset.status === 'indexed').length === {len(FILES)}",
        timeout=120_000,
    )
    assert rows.count() == len(FILES)


def _cited_viewer(page: Any, server: SignedInServer, question: str, answer: str) -> Any:
    server.model.enqueue([answer])
    page.goto("/")
    page.fill("#question", question)
    page.keyboard.press("Enter")
    done = page.locator("#messages article.msg.assistant:not(.streaming) a.cite").first
    done.wait_for(timeout=60_000)
    done.click()  # the passage opens in the inspector, then in full in the page viewer
    with page.context.expect_page() as opened:
        page.click("#passage-open-full")
    viewer = opened.value
    viewer.wait_for_load_state()
    return viewer


def test_slides_sheets_mail_and_pictures_open_where_they_are_cited(
    page: Any, server: SignedInServer, tmp_path: Path
) -> None:
    for name, make in FILES.items():
        (tmp_path / name).write_bytes(make())
    _upload_through_the_dialog(page, tmp_path)
    page.click("#upload-dialog [data-close-dialog]")

    slide = _cited_viewer(page, server, "What revenue did Moorvale make?", "3.9m [1].")
    assert "Slide 2: Regional sales" in slide.locator("#page-label").inner_text()
    marked = slide.locator("table.page-table mark")
    assert marked.count() >= 2 and "Moorvale" in " ".join(marked.all_inner_texts())
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    slide.screenshot(path=str(SCREENSHOTS / "viewer-slide-table.png"))
    slide.close()

    sheet = _cited_viewer(page, server, "What is the monthly fee of a Cobalt permit?", "£24 [1].")
    assert "Sheet “Permits”" in sheet.locator("#page-label").inner_text()
    assert "Cobalt" in " ".join(sheet.locator("table.page-table mark").all_inner_texts())
    assert sheet.locator("table.page-table tr").first.inner_text().split() == [
        "Permit",
        "Zone",
        "Monthly",
        "fee",
    ]
    sheet.close()

    mail = _cited_viewer(page, server, "Who is the warden of the first floor?", "Tomas Berg [1].")
    assert "Message 1 › wardens.csv" in mail.locator("#page-label").inner_text()
    mail.close()

    picture = _cited_viewer(page, server, "When is the fire drill?", "Friday at ten [1].")
    assert picture.locator("#page-image img").count() == 1
    assert picture.locator("svg.page-boxes rect").count() >= 1  # the cited lines, boxed
    picture.screenshot(path=str(SCREENSHOTS / "viewer-picture-boxes.png"))
    picture.close()
