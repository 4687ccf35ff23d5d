"""OCR of scanned PDF pages: which pages are read, what they read as, and the whole path
from upload to a search hit on the right page. Scanned pages are drawn in the test."""

from __future__ import annotations

import io
import os
import signal
import socket
import time
from typing import Any

import pytest
from litestar.testing import TestClient
from PIL import Image
from pypdf import PdfReader, PdfWriter

from bench.ocr import accuracy
from retrieval.parsers import ParseError, isolated, parse_document
from retrieval.parsers import ocr as ocr_module
from retrieval.parsers import pdf as pdf_module
from retrieval.parsers.isolated import IsolatedParser
from retrieval.parsers.ocr import OcrOptions, _Line, is_glyph_soup, needs_ocr, paragraphs
from retrieval.types import Block, DocumentKind
from tests.conftest import fake_settings, signed_in, upload, wait_for
from tests.documents import make_pdf
from tests.scans import glyph_soup, scanned_page, scanned_pdf

POLICY = [
    "Travel policy. The refund limit for travel is 300 euros per trip, and receipts "
    "must be submitted within thirty days of the journey.",
    "Employees who travel abroad receive a daily meal allowance of 45 euros.",
]
PARKING = [
    "Parking. Visitors park in the north garage on level two; the barrier code is "
    "given at the reception desk in building C.",
    "Bicycles are stored in the basement of building A, next to the showers.",
]


def _pdf(pages: list[list[str]], **variant: Any) -> bytes:
    return scanned_pdf([scanned_page(text, **variant) for text in pages])


# Which pages need OCR (no models involved)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  \n 12 ",
        glyph_soup(60),
        "\ue000\ue001\ue002 \ue003\ue004" * 20,  # private-use code points
        "Wkh\ufffd\ufffd uhq\ufffd\ufffd\ufffd ohiw \ufffd\ufffd\ufffd\ufffd" * 10,
        "xqzv kpwt brrk sdfgh mnbv cxzl qwrt" * 5,  # letters, but no words
    ],
)
def test_missing_or_garbage_text_layers_need_ocr(text: str) -> None:
    assert needs_ocr(text)


@pytest.mark.parametrize(
    "text",
    [
        " ".join(POLICY),
        "Umsatz 2024: 1.234.567 € (+4,5 %); Kosten 987.654 €; Ergebnis 246.913 €.",
        "Der Straßenbahnfahrer überprüft die Fahrkarten während der Fahrt.",
        "Съешь же ещё этих мягких французских булок, да выпей чаю.",
        "報銷上限為每次出差三百歐元，收據須在三十天內提交。",
        "| id | qty | price |\n| 1 | 20 | 3.50 |\n| 2 | 5 | 12.00 |\n| 3 | 8 | 7.25 |",
        "def f(x):\n    return {k: v for k, v in x.items() if v > 0}  # filter",
        "E = mc² and ∫ f(x) dx = F(b) − F(a) for continuous functions on [a, b].",
    ],
)
def test_real_text_layers_are_kept(text: str) -> None:
    assert not needs_ocr(text)
    assert not is_glyph_soup(text)


def test_lines_become_paragraphs_in_reading_order() -> None:
    lines = [
        _Line("second line of one.", 100, 140, 170),
        _Line("Paragraph one,", 100, 100, 130),
        _Line("right half", 600, 102, 131),  # same row, further right
        _Line("Paragraph two.", 100, 200, 230),
        _Line("and its end.", 100, 232, 262),
    ]
    assert paragraphs(lines) == [
        "Paragraph one, right half second line of one.",
        "Paragraph two. and its end.",
    ]
    assert paragraphs([]) == []


def test_a_text_pdf_is_never_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("a page with a text layer was sent to OCR")

    monkeypatch.setattr(pdf_module, "recognise_pages", refuse)
    data = make_pdf([" ".join(POLICY), "\n".join(PARKING)])
    assert parse_document(data, DocumentKind.PDF, "t.pdf", ocr=OcrOptions()) == parse_document(
        data, DocumentKind.PDF, "t.pdf"
    )


def test_only_the_scanned_pages_of_a_mixed_pdf_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[int]] = []

    def recognise(data: bytes, numbers: list[int], options: OcrOptions) -> dict[int, Any]:
        asked.append(list(numbers))
        return {number: (Block("Read by OCR."),) for number in numbers}

    monkeypatch.setattr(pdf_module, "recognise_pages", recognise)
    writer = PdfWriter()
    for part in (make_pdf([" ".join(POLICY)]), _pdf([PARKING]), make_pdf(["Closing words."])):
        writer.append(PdfReader(io.BytesIO(part)))
    out = io.BytesIO()
    writer.write(out)
    document = parse_document(out.getvalue(), DocumentKind.PDF, "mixed.pdf", ocr=OcrOptions())
    # A page with a short text layer is looked at too (it may be a scan with a header), and
    # keeps its text when OCR finds nothing on it.
    assert asked == [[2, 3]]
    assert [page.text for page in document.pages][1:] == ["Read by OCR.", "Read by OCR."]


def test_a_short_text_page_without_images_keeps_its_text() -> None:
    data = make_pdf([" ".join(POLICY), "Chapter 2"])
    document = parse_document(data, DocumentKind.PDF, "t.pdf", ocr=OcrOptions())
    assert document.pages[1].text == "Chapter 2"


def test_with_ocr_off_a_scanned_pdf_fails_with_a_reason() -> None:
    with pytest.raises(ParseError, match="OCR of scanned pages is off"):
        parse_document(_pdf([POLICY]), DocumentKind.PDF, "scan.pdf")


def test_a_blank_scan_is_not_sent_to_the_models() -> None:
    blank = scanned_pdf([Image.new("L", (1240, 1754), 255)])
    with pytest.raises(ParseError, match="not even by OCR"):
        parse_document(blank, DocumentKind.PDF, "blank.pdf", ocr=OcrOptions())


def test_past_its_time_budget_ocr_skips_the_remaining_pages_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[Any] = []

    def slow_read(page: Any, options: OcrOptions) -> tuple[Block, ...]:
        read.append(page)
        time.sleep(0.01)  # longer than the whole budget
        return (Block("Read by OCR."),)

    monkeypatch.setattr(ocr_module, "_read_page", slow_read)
    writer = PdfWriter()
    for part in (_pdf([POLICY]), make_pdf(["A page of text, never sent to OCR."]), _pdf([PARKING])):
        writer.append(PdfReader(io.BytesIO(part)))
    writer.append(PdfReader(io.BytesIO(_pdf([POLICY]))))
    out = io.BytesIO()
    writer.write(out)
    options = OcrOptions(document_budget_s=0.001)
    document = parse_document(out.getvalue(), DocumentKind.PDF, "long.pdf", ocr=options)
    assert len(read) == 1  # the first page is always read: the budget is checked between pages
    assert [page.text for page in document.pages] == [
        "Read by OCR.",
        "A page of text, never sent to OCR.",
        "",
        "",
    ]
    [warning] = document.warnings
    assert "RAGDESK_OCR_DOCUMENT_BUDGET_S" in warning
    assert "2 of 3 scanned pages, from page 3 on, were not read" in warning


def test_the_parser_child_asks_for_no_more_time_than_the_ocr_budget() -> None:
    options = OcrOptions(page_timeout_s=60, max_pages=300, document_budget_s=600)
    assert options.time_for(3) == 180  # a few pages: their page time
    assert options.time_for(300) == 660  # many: the budget, and the page that runs over it
    assert options.time_for(1000) == 660


def test_too_many_scanned_pages_fail_before_any_is_read() -> None:
    with pytest.raises(ParseError, match="at most 1 per document"):
        parse_document(
            _pdf([POLICY, PARKING]), DocumentKind.PDF, "s.pdf", ocr=OcrOptions(max_pages=1)
        )


# Real recognition (the models of the installed rapidocr wheel)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sockets refuse to connect, and the models load afresh: nothing is downloaded."""

    def refuse(*args: object) -> None:
        raise AssertionError("OCR tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    ocr_module._engine.cache_clear()


@pytest.mark.usefixtures("no_network")
def test_scanned_pages_are_read_with_their_page_numbers() -> None:
    data = scanned_pdf(
        [scanned_page(POLICY), scanned_page(PARKING, skew_degrees=2.0, noise=0.03, seed=1)]
    )
    document = parse_document(data, DocumentKind.PDF, "scan.pdf", ocr=OcrOptions(threads=2))
    assert [page.number for page in document.pages] == [1, 2]
    assert accuracy(document.pages[0].text, " ".join(POLICY)) >= 0.97
    assert accuracy(document.pages[1].text, " ".join(PARKING)) >= 0.95
    assert len(document.pages[0].blocks) == 2  # the two paragraphs stay apart


def test_a_garbage_text_layer_is_replaced_by_what_the_page_shows() -> None:
    data = scanned_pdf([scanned_page(POLICY)], text_layers=[glyph_soup(80)])
    layer = parse_document(data, DocumentKind.PDF, "soup.pdf").pages[0].text
    assert is_glyph_soup(layer)  # pypdf does extract the invisible soup
    document = parse_document(data, DocumentKind.PDF, "soup.pdf", ocr=OcrOptions(threads=2))
    assert accuracy(document.pages[0].text, " ".join(POLICY)) >= 0.97


@pytest.mark.parametrize(("page_timeout_s", "enough"), [(1.0, False), (300.0, True)])
def test_the_parser_child_gets_the_ocr_time_of_its_scanned_pages(
    page_timeout_s: float, enough: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The child asks for the page's OCR time before reading, and gets exactly that much
    # more. Where it is not enough, the child is stopped right after it asks, so that it
    # overruns the grown budget however fast this machine reads the page.
    parser = IsolatedParser(timeout_s=5, ocr=OcrOptions(page_timeout_s=page_timeout_s))
    if not enough:
        read_frame = isolated._read_frame

        def stop_after_asking(stream: Any, deadline: float) -> bytes:
            frame = read_frame(stream, deadline)
            if b'"ocr_pages"' in frame:
                for pid in parser.pids():
                    os.kill(pid, signal.SIGSTOP)
            return frame

        monkeypatch.setattr(isolated, "_read_frame", stop_after_asking)
    try:
        if enough:
            document = parser.parse(_pdf([POLICY]), DocumentKind.PDF, "scan.pdf")
            assert accuracy(document.pages[0].text, " ".join(POLICY)) >= 0.97
        else:
            with pytest.raises(ParseError, match="longer than 6 s"):
                parser.parse(_pdf([POLICY]), DocumentKind.PDF, "scan.pdf")
    finally:
        parser.close()


def test_upload_of_a_scanned_pdf_is_searchable_and_cites_the_right_page(tmp_path: Any) -> None:
    settings = fake_settings(tmp_path / "data", ocr_threads=2)
    with signed_in(settings) as client:
        _upload_and_search(client)


def _upload_scan(client: TestClient[Any]) -> dict[str, Any]:
    """The two-page scan, uploaded and ingested: its document as the API shows it."""
    [created] = upload(client, ("scan.pdf", _pdf([POLICY, PARKING]))).json()["documents"]

    def done() -> dict[str, Any] | None:
        document: dict[str, Any] = client.get(f"/api/documents/{created['id']}").json()
        return document if document["status"] in ("indexed", "failed") else None

    document: dict[str, Any] = wait_for(done, timeout=300, interval=0.5)
    assert document["status"] == "indexed", document
    return document


def _upload_and_search(client: TestClient[Any]) -> None:
    created = _upload_scan(client)
    hits = client.post("/api/search", json={"query": "where do visitors park", "k": 3})
    top = hits.json()["hits"][0]
    assert (top["document_id"], top["page"]) == (created["id"], 2)
    # The cited passage is a slice of the page's OCR text: the viewer highlights it.
    page_text = client.app.state.services.store.page_text(created["id"], 2)
    assert page_text[top["start"] : top["end"]] == top["text"]
    assert "north garage" in top["text"]
    viewer = client.get(f"/documents/{created['id']}/pages/2?chunk={top['chunk_id']}")
    assert viewer.status_code == 200 and "north garage" in viewer.text


def test_a_scan_cut_short_by_the_ocr_budget_is_indexed_with_a_note(tmp_path: Any) -> None:
    settings = fake_settings(tmp_path / "data", ocr_threads=2, ocr_document_budget_s=0.001)
    with signed_in(settings) as client:
        document = _upload_scan(client)
        assert "1 of 2 scanned pages, from page 2 on, were not read" in document["error"]
        hits = client.post("/api/search", json={"query": "refund limit for travel", "k": 3})
        assert hits.json()["hits"][0]["page"] == 1
        assert client.app.state.services.store.page_text(document["id"], 2) == ""
        row = client.get(f"/ui/documents/{document['id']}/table-row")  # its collection's page
        assert row.status_code == 200 and "were not read" in row.text


def test_ocr_under_too_low_a_memory_cap_fails_with_the_reason() -> None:
    parser = IsolatedParser(timeout_s=5, memory_bytes=768 << 20, ocr=OcrOptions())
    try:
        with pytest.raises(ParseError, match="RAGDESK_PARSE_MEMORY_MB"):
            parser.parse(_pdf([POLICY]), DocumentKind.PDF, "scan.pdf")
    finally:
        parser.close()
