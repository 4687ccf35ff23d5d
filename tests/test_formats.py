"""Every format staff keep, through the API: uploaded, parsed in the parser child, cut into
passages, searched, and cited at the right slide, sheet, message or chapter; a table's
rows found with their header. One upload request holds them all, as a user would send."""

from __future__ import annotations

import io
from email.message import EmailMessage
from typing import Any

import pytest
from litestar.testing import TestClient
from openpyxl import Workbook
from pptx import Presentation
from pptx.util import Inches

from tests.conftest import upload, wait_indexed
from tests.test_parsers_epub import _BOOK, _epub
from tests.test_parsers_odf import ods, odt


def _deck() -> bytes:
    deck = Presentation()
    title = deck.slides.add_slide(deck.slide_layouts[0])
    title.shapes.title.text = "Quarterly review"
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Regional sales"
    table = slide.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(6), Inches(2)).table
    for r, row in enumerate([["Region", "Revenue"], ["Fjordland", "4.2m"], ["Moorvale", "3.9m"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    slide.notes_slide.notes_text_frame.text = "Fjordland beat its target by a wide margin."
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def _workbook() -> bytes:
    book = Workbook()
    sheet = book.active
    sheet.title = "Intro"
    sheet.append(["This workbook lists the parking permits."])
    permits = book.create_sheet("Permits")
    permits.append(["Permit", "Zone", "Monthly fee"])
    permits.append(["Amber", "North deck", "£38"])
    permits.append(["Cobalt", "South yard", "£24"])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def _mail() -> bytes:
    message = EmailMessage()
    message["From"] = "Facilities <facilities@example.com>"
    message["To"] = "staff@example.com"
    message["Subject"] = "Lift maintenance on Thursday"
    message["Date"] = "Mon, 07 Dec 2026 09:00:00 +0000"
    message.set_content("The goods lift in the Harbour building is closed on Thursday.")
    message.add_attachment(
        b"Floor,Warden\nGround,Priya Nair\nFirst,Tomas Berg\n",
        maintype="text",
        subtype="csv",
        filename="wardens.csv",
    )
    return bytes(message)


def _spreadsheet_ods() -> bytes:
    row = "<table:table-row>{}</table:table-row>"
    cell = '<table:table-cell office:value-type="string"><text:p>{}</text:p></table:table-cell>'
    rows = [["Course", "Length"], ["Forklift safety", "2 days"], ["First aid", "1 day"]]
    body = "".join(row.format("".join(cell.format(v) for v in values)) for values in rows)
    return ods(f'<table:table table:name="Courses">{body}</table:table>')


FILES = {
    "review.pptx": (_deck, "Fjordland", "Slide 2: Regional sales", "| Region | Revenue |"),
    "permits.xlsx": (_workbook, "Cobalt", "Sheet “Permits”", "| Permit | Zone | Monthly fee |"),
    "lift.eml": (_mail, "Tomas", "Message 1 › wardens.csv", "| Floor | Warden |"),
    "courses.ods": (_spreadsheet_ods, "Forklift", "Sheet “Courses”", "| Course | Length |"),
    "letter.odt": (
        lambda: odt(
            "<text:h text:outline-level='1'>Visitors</text:h><text:p>Badges at gate B.</text:p>"
        ),
        "Badges",
        "",
        None,
    ),
    "book.epub": (lambda: _epub(_BOOK), None, "Chapter 1", None),
    "note.rtf": (
        lambda: rb"{\rtf1\ansi Keys are kept at the Quayside reception.\par}",
        "Quayside",
        "",
        None,
    ),
}


@pytest.fixture
def indexed(client: TestClient[Any]) -> dict[str, dict[str, Any]]:
    response = upload(client, *((name, make()) for name, (make, *_) in FILES.items()))
    assert response.status_code == 201, response.text
    documents = {d["filename"]: d for d in response.json()["documents"]}
    return {name: wait_indexed(client, documents[name]["id"]) for name in FILES}


def test_every_format_is_indexed_and_found_where_it_is(
    client: TestClient[Any], indexed: dict[str, dict[str, Any]]
) -> None:
    for name, document in indexed.items():
        assert document["status"] == "indexed", (name, document.get("error"))
    for name, (_, word, label, header) in FILES.items():
        if word is None:
            continue
        hits = client.post("/api/search", json={"query": word, "k": 10}).json()["hits"]
        found = [h for h in hits if h["document_id"] == indexed[name]["id"] and word in h["text"]]
        if header is not None:  # a table's rows come with the header they sit under
            found = [h for h in found if h["text"].startswith("| ")]
            assert found and header in (found[0]["table"] or ""), name
        else:
            assert found and found[0]["table"] is None, name
        assert found[0]["label"] == label, name


def test_a_cited_slide_opens_with_its_label_and_its_table_drawn_as_a_table(
    client: TestClient[Any], indexed: dict[str, dict[str, Any]]
) -> None:
    document = indexed["review.pptx"]
    hits = client.post("/api/search", json={"query": "Moorvale", "k": 5}).json()["hits"]
    hit = next(h for h in hits if h["document_id"] == document["id"])
    page = client.get(f"/documents/{document['id']}/pages/{hit['page']}?chunk={hit['chunk_id']}")
    assert page.status_code == 200
    assert "Slide 2: Regional sales" in page.text
    assert '<table class="page-table">' in page.text and "<mark" in page.text


def test_a_column_name_finds_the_rows_under_it_by_words_too(
    client: TestClient[Any], indexed: dict[str, dict[str, Any]]
) -> None:
    """The rows of a table do not hold its header; the full-text index reads it with them,
    so a lexical search for a column name ("Monthly fee") finds a row passage."""
    services = client.app.state.services
    rows = (
        services.db.read()
        .execute(
            "SELECT c.id FROM chunks_fts f JOIN chunks c ON c.id = f.rowid"
            " WHERE chunks_fts MATCH ? AND c.table_context IS NOT NULL AND c.document_id = ?",
            ['"monthly fee"', indexed["permits.xlsx"]["id"]],
        )
        .fetchall()
    )
    assert rows, "no table passage of permits.xlsx is found by its column name"
