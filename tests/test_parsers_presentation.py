"""PPTX parsing: slides as pages, reading order, tables, notes, hidden slides, bad decks."""

from __future__ import annotations

import io
import re
import time
import zipfile
from collections.abc import Callable

import pptx
import pytest
from pptx.presentation import Presentation
from pptx.slide import Slide
from pptx.util import Inches

from retrieval.parsers import UnsupportedDocumentType, detect_kind, presentation
from retrieval.parsers.errors import ParseError
from retrieval.parsers.presentation import parse_pptx
from retrieval.types import Block, DocumentKind, ParsedPage

# Layouts of python-pptx's default template.
TITLE_AND_CONTENT, TITLE_ONLY, BLANK = 1, 5, 6


def _save(deck: Presentation) -> bytes:
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _slide(deck: Presentation, layout: int, title: str = "") -> Slide:
    slide: Slide = deck.slides.add_slide(deck.slide_layouts[layout])
    if title:
        assert slide.shapes.title is not None
        slide.shapes.title.text = title
    return slide


def _text_box(slide: Slide, top: float, left: float, text: str) -> None:
    box = slide.shapes.add_textbox(Inches(left), Inches(top), Inches(2), Inches(0.5))
    box.text_frame.text = text


def _rewrite(data: bytes, name: str, edit: Callable[[str], str]) -> bytes:
    """The deck with one part's XML edited (for decks python-pptx would not write)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            content = source.read(item)
            if item.filename == name:
                content = edit(content.decode()).encode()
            target.writestr(item, content)
    return out.getvalue()


def _deck_bytes() -> bytes:
    deck = pptx.Presentation()
    first = _slide(deck, TITLE_AND_CONTENT, "Quarterly results")
    body = first.placeholders[1].text_frame
    body.text = "Revenue up 12%"
    body.add_paragraph().text = "Costs flat"
    notes = first.notes_slide.notes_text_frame
    assert notes is not None
    notes.text = "Mention the new office"

    prices = _slide(deck, TITLE_ONLY, "Prices")
    table = prices.shapes.add_table(3, 3, Inches(1), Inches(2), Inches(6), Inches(2)).table
    cells = [["Plan", "Price", "Seats"], ["Silver", "500", "30"], ["Gold", "900", "60"]]
    for r, row in enumerate(cells):
        for c, value in enumerate(row):
            table.cell(r, c).text = value

    layout = _slide(deck, BLANK)
    _text_box(layout, 3, 1, "Bottom")
    _text_box(layout, 1, 5, "Top right")
    _text_box(layout, 1, 1, "Top left")
    group = layout.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(4), Inches(2), Inches(1), Inches(1)).text_frame.text = "G2"
    group.shapes.add_textbox(Inches(1), Inches(2), Inches(1), Inches(1)).text_frame.text = "G1"

    hidden = _slide(deck, TITLE_ONLY, "Backup numbers")
    hidden.element.set("show", "0")
    _text_box(hidden, 2, 1, "Only for questions")
    return _save(deck)


def _page(number: int) -> ParsedPage:
    return parse_pptx(_deck_bytes(), "upload").pages[number - 1]


def test_one_page_per_slide_with_labels() -> None:
    document = parse_pptx(_deck_bytes(), "upload")
    assert [(p.number, p.label) for p in document.pages] == [
        (1, "Slide 1: Quarterly results"),
        (2, "Slide 2: Prices"),
        (3, "Slide 3"),
        (4, "Slide 4 (hidden): Backup numbers"),
    ]
    # python-pptx titles every deck "PowerPoint Presentation": the first slide's title wins.
    assert document.title == "Quarterly results"


def test_title_heading_then_body_then_notes() -> None:
    assert _page(1).blocks == (
        Block("Quarterly results", is_heading=True),
        Block("Revenue up 12%\nCosts flat"),
        Block("Notes: Mention the new office"),
    )


def test_table_rows_under_header_and_slide_title() -> None:
    context = "Prices\n| Plan | Price | Seats |\n| --- | --- | --- |"
    assert _page(2).blocks == (
        Block("Prices", is_heading=True),
        Block("| Plan | Price | Seats |", is_heading=True, table=context),
        Block("| Silver | 500 | 30 |", table=context),
        Block("| Gold | 900 | 60 |", table=context),
    )


def test_reading_order_top_to_bottom_left_to_right_into_groups() -> None:
    texts = [block.text for block in _page(3).blocks]
    assert texts == ["Top left", "Top right", "G1", "G2", "Bottom"]


def test_placeholder_without_position_stands_where_its_layout_puts_it() -> None:
    deck = pptx.Presentation()
    slide = _slide(deck, TITLE_AND_CONTENT, "Agenda")
    slide.placeholders[1].text_frame.text = "Body"  # no position of its own: the layout's
    _text_box(slide, 0.1, 1, "Above the body")
    _text_box(slide, 7, 1, "Below the body")
    texts = [block.text for block in parse_pptx(_save(deck), "upload").pages[0].blocks]
    assert texts == ["Agenda", "Above the body", "Body", "Below the body"]


def _placeholder(shape_id: int, idx: int) -> str:
    return (
        f'<p:sp><p:nvSpPr><p:cNvPr id="{shape_id}" name="p{shape_id}"/><p:cNvSpPr/>'
        f'<p:nvPr><p:ph type="body" idx="{idx}"/></p:nvPr></p:nvSpPr><p:spPr/>'
        f"<p:txBody><a:bodyPr/><a:p><a:r><a:t>x{shape_id}</a:t></a:r></a:p></p:txBody></p:sp>"
    )


def test_many_placeholders_are_placed_in_linear_time() -> None:
    # python-pptx finds each one's place by scanning the layout: this 50 KB deck took 130 s.
    many = range(100, 1100)
    deck = pptx.Presentation()
    _slide(deck, TITLE_AND_CONTENT)
    data = _rewrite(
        _save(deck),
        "ppt/slides/slide1.xml",
        lambda xml: xml.replace(
            "</p:spTree>", "".join(_placeholder(i, 1) for i in many) + "</p:spTree>"
        ),
    )
    data = _rewrite(
        data,
        "ppt/slideLayouts/slideLayout2.xml",
        lambda xml: xml.replace(
            "</p:grpSpPr>", "</p:grpSpPr>" + "".join(_placeholder(i, i) for i in many), 1
        ),
    )
    started = time.perf_counter()
    blocks = parse_pptx(data, "upload").pages[0].blocks
    assert time.perf_counter() - started < 10
    assert len(blocks) == len(many)


def test_slide_without_layout_is_read() -> None:
    deck = pptx.Presentation()
    _slide(deck, TITLE_ONLY, "Orphan")
    data = _rewrite(
        _save(deck),
        "ppt/slides/_rels/slide1.xml.rels",
        lambda xml: re.sub(r"<Relationship [^>]*slideLayout[^>]*/>", "", xml),
    )
    assert parse_pptx(data, "upload").pages[0].label == "Slide 1: Orphan"


def test_hidden_slide_is_still_read() -> None:
    assert [block.text for block in _page(4).blocks] == ["Backup numbers", "Only for questions"]


def test_named_core_title_wins_and_untitled_deck_falls_back() -> None:
    deck = pptx.Presentation()
    _text_box(_slide(deck, BLANK), 1, 1, "No title placeholder here")
    assert parse_pptx(_save(deck), "upload").title == "upload"
    deck.core_properties.title = "Sales kick-off 2025"
    assert parse_pptx(_save(deck), "upload").title == "Sales kick-off 2025"


def test_soft_breaks_long_frames_and_merged_header() -> None:
    deck = pptx.Presentation()
    slide = _slide(deck, TITLE_ONLY, "Regions")
    frame = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(8), Inches(1)).text_frame
    frame.text = "first\vline"  # a soft line break inside one paragraph
    long = slide.shapes.add_textbox(Inches(1), Inches(1.5), Inches(8), Inches(1)).text_frame
    long.text = "A" * 400
    long.add_paragraph().text = "B" * 400
    table = slide.shapes.add_table(2, 3, Inches(1), Inches(3), Inches(6), Inches(1)).table
    table.cell(0, 0).text = "Region"
    table.cell(0, 1).merge(table.cell(0, 2))
    table.cell(0, 1).text = "Sales"
    for c, value in enumerate(["North", "10", "20"]):
        table.cell(1, c).text = value
    blocks = parse_pptx(_save(deck), "upload").pages[0].blocks
    assert [b.text for b in blocks[1:4]] == ["first line", "A" * 400, "B" * 400]
    context = "Regions\n| Region | Sales | Sales |\n| --- | --- | --- |"
    assert blocks[4:] == (
        Block("| Region | Sales | Sales |", is_heading=True, table=context),
        Block("| North | 10 | 20 |", table=context),
    )


def test_merged_down_cell_repeats_in_each_row_and_a_header_is_no_title() -> None:
    deck = pptx.Presentation()
    slide = _slide(deck, BLANK)  # no title: the deck's title falls back to the file's name
    table = slide.shapes.add_table(3, 2, Inches(1), Inches(1), Inches(4), Inches(1)).table
    for r, row in enumerate([["Region", "Store"], ["North", "Leeds"], ["", "York"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    table.cell(1, 0).merge(table.cell(2, 0))
    document = parse_pptx(_save(deck), "upload")
    assert document.title == "upload"
    assert [b.text for b in document.pages[0].blocks] == [
        "| Region | Store |",
        "| North | Leeds |",
        "| North | York |",
    ]


def test_table_without_header_flag_or_header_look_has_no_header() -> None:
    deck = pptx.Presentation()
    table = (
        _slide(deck, BLANK).shapes.add_table(2, 2, Inches(0), Inches(0), Inches(4), Inches(1)).table
    )
    table.first_row = False
    for r, row in enumerate([["1", "2"], ["3", "4"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    blocks = parse_pptx(_save(deck), "upload").pages[0].blocks
    assert [(b.text, b.table) for b in blocks] == [("| 1 | 2 |", None), ("| 3 | 4 |", None)]


def test_mac_printer_settings_are_not_a_dtd() -> None:
    # python-pptx's template, made by PowerPoint for Mac, keeps its printer settings as an
    # Apple plist that opens with a plain <!DOCTYPE plist ...>: that declares nothing.
    deck = pptx.Presentation()
    _slide(deck, TITLE_ONLY, "Made on a Mac")
    data = _save(deck)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        settings = archive.read("ppt/printerSettings/printerSettings1.bin")
    assert b"<!DOCTYPE plist" in settings
    assert parse_pptx(data, "upload").pages[0].label == "Slide 1: Made on a Mac"


def test_recognised_by_its_main_part() -> None:
    assert detect_kind(_deck_bytes(), "upload") is DocumentKind.PPTX
    with pytest.raises(UnsupportedDocumentType):  # a broken ZIP not named as a deck
        detect_kind(b"PK\x03\x04 not really", "upload")
    assert detect_kind(b"%PDF-1.7", "upload") is not DocumentKind.PPTX


def _reason(data: bytes) -> str:
    with pytest.raises(ParseError) as caught:
        parse_pptx(data, "upload")
    return caught.value.reason


def test_broken_zip() -> None:
    assert _reason(b"PK\x03\x04" + b"\x00" * 64) == (
        "not a valid PPTX file (the ZIP container is broken)"
    )


def test_zip_without_presentation_part() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("word/document.xml", "<w:document/>")
    assert _reason(out.getvalue()) == "not a valid PPTX file (ppt/presentation.xml is missing)"


def test_encrypted_or_legacy_ppt() -> None:
    assert "password-protected" in _reason(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512)


def test_too_many_slides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(presentation, "MAX_SLIDES", 2)
    deck = pptx.Presentation()
    for _ in range(3):
        _slide(deck, BLANK)
    assert _reason(_save(deck)) == "the presentation has 3 slides; at most 2 are accepted"


def _one_slide_deck() -> bytes:
    deck = pptx.Presentation()
    _slide(deck, TITLE_ONLY, "Only")
    return _save(deck)


def _repeat_first_slide(xml: str, r_id: str) -> str:
    return re.sub(r"(<p:sldId [^>]*/>)", rf'\1<p:sldId id="999" r:id="{r_id}"/>', xml, count=1)


def test_slide_listed_twice_is_refused() -> None:
    data = _one_slide_deck()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        listed = archive.read("ppt/presentation.xml").decode()
    r_id = re.search(r'<p:sldId [^>]*r:id="(\w+)"', listed)
    assert r_id is not None
    data = _rewrite(data, "ppt/presentation.xml", lambda xml: _repeat_first_slide(xml, r_id[1]))
    assert _reason(data) == (
        "the PPTX lists one slide twice (slides 1 and 2); such a file is not made by "
        "PowerPoint, refused"
    )


def test_slide_listed_but_missing() -> None:
    data = _rewrite(
        _one_slide_deck(), "ppt/presentation.xml", lambda xml: _repeat_first_slide(xml, "rId99")
    )
    assert _reason(data) == "not a valid PPTX file (a slide it lists is missing)"


def test_template_is_not_a_presentation() -> None:
    data = _rewrite(
        _one_slide_deck(),
        "[Content_Types].xml",
        lambda xml: xml.replace("presentationml.presentation.main", "presentationml.template.main"),
    )
    assert _reason(data).startswith("not a PowerPoint presentation")


def test_dtd_is_refused_before_parsing() -> None:
    data = _rewrite(
        _one_slide_deck(),
        "ppt/presentation.xml",
        lambda xml: xml.replace("?>", '?><!DOCTYPE p [<!ENTITY x "boom">]>', 1),
    )
    assert _reason(data) == "the PPTX contains XML entity declarations, refused"


def test_cells_merged_down_and_across_make_a_two_row_header() -> None:
    """PowerPoint flags only the first row as header; "Region" merged over two rows and
    "2025" merged over its quarters make the second row header too ("2025 Q1")."""
    deck = pptx.Presentation()
    slide = _slide(deck, TITLE_ONLY, "Quarterly sales")
    table = slide.shapes.add_table(4, 3, Inches(1), Inches(2), Inches(6), Inches(2)).table
    table.cell(0, 0).merge(table.cell(1, 0))
    table.cell(0, 1).merge(table.cell(0, 2))
    table.cell(0, 0).text = "Region"
    table.cell(0, 1).text = "2025"
    for r, values in enumerate([["Q1", "Q2"], ["10", "20"], ["30", "40"]], start=1):
        for c, value in enumerate(values, start=1):
            table.cell(r, c).text = value
    table.cell(2, 0).text = "North"
    table.cell(3, 0).text = "South"
    header = "| Region | 2025 Q1 | 2025 Q2 |"
    context = f"Quarterly sales\n{header}\n| --- | --- | --- |"
    assert parse_pptx(_save(deck), "upload").pages[0].blocks[1:] == (
        Block(header, is_heading=True, table=context),
        Block("| North | 10 | 20 |", table=context),
        Block("| South | 30 | 40 |", table=context),
    )


def test_a_label_merged_across_body_cells_is_written_once() -> None:
    deck = pptx.Presentation()
    table = (
        _slide(deck, BLANK).shapes.add_table(3, 3, Inches(0), Inches(0), Inches(4), Inches(1)).table
    )
    for r, values in enumerate([["Item", "Qty", "Price"], ["Pen", "3", "1"], ["Total", "", "3"]]):
        for c, value in enumerate(values):
            table.cell(r, c).text = value
    table.cell(2, 0).merge(table.cell(2, 1))
    blocks = parse_pptx(_save(deck), "upload").pages[0].blocks
    assert [b.text for b in blocks] == [
        "| Item | Qty | Price |",
        "| Pen | 3 | 1 |",
        "| Total |  | 3 |",
    ]
