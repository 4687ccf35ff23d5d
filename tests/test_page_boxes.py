"""#26 item 9: a cited PDF passage shown on its page as it looks, boxed: the boxes found in
the page's text layer (in the parser child), stored with the passage, returned with every
citation by /api and /v1, and drawn over the rendered page in the viewer."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from litestar.testing import TestClient

from retrieval.parsers import ParseError
from retrieval.parsers.isolated import IsolatedParser
from retrieval.parsers.page_boxes import passage_boxes, render_page
from tests.conftest import fake_model, sse_events, upload, wait_indexed
from tests.documents import make_pdf

PAGES = [
    "Travel policy\nThis page is about nothing in particular.",
    "Parking\nThe parking fee is 4 euros per day.\nVisitors park in the north car park.",
]


def test_a_passages_lines_are_boxed_where_they_stand_on_the_page() -> None:
    data = make_pdf(PAGES)
    both = "Parking\nThe parking fee is 4 euros per day.\nVisitors park in the north car park."
    fee, visitors, missing, nowhere = passage_boxes(
        data,
        [
            (2, "The parking fee is 4 euros per day."),
            (2, both),
            (2, "A sentence this page does not hold at all."),
            (9, "The parking fee is 4 euros per day."),
        ],
    )
    assert len(fee) == 1 and missing == [] and nowhere == []
    x0, y0, x1, y1 = fee[0]
    assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1  # fractions of the page, top-left origin
    assert y1 < 0.5  # near the top of the page, as drawn
    assert len(visitors) == 2 and visitors[0] == fee[0]  # each line boxed, in order
    assert visitors[1][1] > visitors[0][1]  # the next line is lower on the page


def test_a_page_is_rendered_and_a_missing_one_refused() -> None:
    data = make_pdf(PAGES)
    png = render_page(data, 2, 400)
    assert png.startswith(b"\x89PNG") and len(png) > 1000
    with pytest.raises(IndexError):
        render_page(data, 3, 400)


def test_boxes_and_pages_come_from_the_parser_child() -> None:
    parser = IsolatedParser(timeout_s=30, processes=1)
    try:
        data = make_pdf(PAGES)
        [[box]] = parser.passage_boxes(data, [(2, "The parking fee is 4 euros per day.")])
        assert box == passage_boxes(data, [(2, "The parking fee is 4 euros per day.")])[0][0]
        assert parser.render_page(data, 1, 300).startswith(b"\x89PNG")
        with pytest.raises(ParseError, match="no page 7"):
            parser.render_page(data, 7, 300)
        with pytest.raises(ParseError):
            parser.render_page(b"%PDF-1.7 not really", 1, 300)  # unreadable: a clear error
    finally:
        parser.close()


def test_a_cited_pdf_passage_carries_its_boxes_to_the_api_and_the_viewer(
    client: TestClient[Any],
) -> None:
    created = upload(client, ("travel.pdf", make_pdf(PAGES)))
    document_id = created.json()["documents"][0]["id"]
    wait_indexed(client, document_id)
    fake_model(client).enqueue(["The fee is 4 euros a day [1]."])
    events = sse_events(
        client.post("/api/chat", json={"message": "What is the parking fee per day?"}).text
    )
    done = json.loads(next(data for name, data in events if name == "done"))
    citation = done["citations"][0]
    assert citation["page"] == 2 and citation["boxes"], citation
    assert all(0 <= v <= 1 for box in citation["boxes"] for v in box)

    viewer = client.get(citation["url"].split("#")[0]).text
    assert f'src="/documents/{document_id}/pages/2/image"' in viewer
    rects = re.findall(r'<rect x="([0-9.]+)" y="([0-9.]+)"', viewer)
    assert [(float(x), float(y)) for x, y in rects] == [
        (box[0], box[1]) for box in citation["boxes"]
    ]
    image = client.get(f"/documents/{document_id}/pages/2/image")
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    assert image.content.startswith(b"\x89PNG")
    assert client.get(f"/documents/{document_id}/pages/3/image").status_code == 404


def test_other_kinds_have_no_page_image(client: TestClient[Any]) -> None:
    created = upload(client, ("notes.md", b"# Notes\n\nThe parking fee is 4 euros per day."))
    document_id = created.json()["documents"][0]["id"]
    wait_indexed(client, document_id)
    assert client.get(f"/documents/{document_id}/pages/1/image").status_code == 404
    assert "page-image" not in client.get(f"/documents/{document_id}/pages/1").text


def test_page_images_beyond_two_at_once_are_told_to_come_back(tmp_path: Any) -> None:
    """One renderer child: a third request at once is a 503 with Retry-After, never a
    queue of threads each holding a PDF."""
    import threading

    from app.documents.page_images import PageImages, RendererBusy
    from retrieval.uploads import UploadFiles

    files = UploadFiles(tmp_path)
    stored = files.save(make_pdf(PAGES))
    images = PageImages(files, memory_bytes=1 << 30)
    release = threading.Event()
    started = threading.Semaphore(0)

    def slow_render(data: bytes, page: int, width: int) -> bytes:
        started.release()
        release.wait(30)
        return b"\\x89PNG page"

    images.renderer.render_page = slow_render  # type: ignore[method-assign]
    threads = [threading.Thread(target=images.png, args=(stored, n)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for _ in threads:
        assert started.acquire(timeout=30)
    try:
        with pytest.raises(RendererBusy):
            images.png(stored, 3)
    finally:
        release.set()
        for thread in threads:
            thread.join(30)
    assert images.png(stored, 1) == b"\\x89PNG page"  # kept: no render, no wait
    images.close()


def test_a_table_row_is_searched_as_the_page_shows_it() -> None:
    """Passages of a PDF table are Markdown rows; the page has the cells' words apart."""
    from retrieval.parsers.page_boxes import _fragments

    assert list(_fragments("| Silver plan | £1,250 | A \\| B |\n\n| x | y |")) == [
        "Silver plan £1,250 A | B"
    ]
