"""ODT, ODS and ODP: packages written here as a ZIP of XML strings, as LibreOffice lays
them out (``mimetype`` first and stored)."""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Callable

import pytest

from retrieval.parsers import UnsupportedDocumentType, detect_kind
from retrieval.parsers.errors import ParseError
from retrieval.parsers.odf import MAX_SLIDES, parse_odp, parse_ods, parse_odt
from retrieval.parsers.tables import MAX_COLUMNS
from retrieval.types import Block, DocumentKind, ParsedDocument

MIME = "application/vnd.oasis.opendocument."
NS = " ".join(
    f'xmlns:{prefix}="urn:oasis:names:tc:opendocument:xmlns:{name}"'
    for prefix, name in (
        ("office", "office:1.0"),
        ("text", "text:1.0"),
        ("table", "table:1.0"),
        ("draw", "drawing:1.0"),
        ("presentation", "presentation:1.0"),
        ("style", "style:1.0"),
        ("meta", "meta:1.0"),
    )
)
MANIFEST = (
    '<?xml version="1.0" encoding="UTF-8"?>'
    '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0">'
    '<manifest:file-entry manifest:full-path="/" manifest:media-type="{mime}"/>'
    '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml">'
    "{extra}</manifest:file-entry></manifest:manifest>"
)
ENCRYPTION = (
    '<manifest:encryption-data manifest:checksum-type="SHA1/1K" manifest:checksum="x">'
    '<manifest:algorithm manifest:algorithm-name="Blowfish CFB" '
    'manifest:initialisation-vector="x"/></manifest:encryption-data>'
)


def content(body: str, kind: str = "text", styles: str = "") -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {NS} '
        f'office:version="1.3"><office:automatic-styles>{styles}</office:automatic-styles>'
        f"<office:body><office:{kind}>{body}</office:{kind}></office:body>"
        "</office:document-content>"
    )


def package(
    kind: str,
    content_xml: str,
    *,
    title: str | None = None,
    manifest_extra: str = "",
    mimetype_first: bool = True,
) -> bytes:
    mime = MIME + kind
    meta = (
        f'<?xml version="1.0" encoding="UTF-8"?><office:document-meta {NS} '
        'xmlns:dc="http://purl.org/dc/elements/1.1/"><office:meta>'
        + (f"<dc:title>{title}</dc:title>" if title is not None else "")
        + "</office:meta></office:document-meta>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        if mimetype_first:
            archive.writestr(zipfile.ZipInfo("mimetype"), mime, zipfile.ZIP_STORED)
        archive.writestr("content.xml", content_xml)
        archive.writestr("meta.xml", meta)
        archive.writestr("META-INF/manifest.xml", MANIFEST.format(mime=mime, extra=manifest_extra))
        if not mimetype_first:
            archive.writestr("mimetype", mime)  # compressed and last: lax producers
    return buffer.getvalue()


def odt(
    body: str, styles: str = "", *, title: str | None = None, manifest_extra: str = ""
) -> bytes:
    data = content(body, "text", styles)
    return package("text", data, title=title, manifest_extra=manifest_extra)


def ods(body: str, *, title: str | None = None, manifest_extra: str = "") -> bytes:
    data = content(body, "spreadsheet")
    return package("spreadsheet", data, title=title, manifest_extra=manifest_extra)


def odp(body: str, *, title: str | None = None, manifest_extra: str = "") -> bytes:
    data = content(body, "presentation")
    return package("presentation", data, title=title, manifest_extra=manifest_extra)


def cells(*values: str) -> str:
    return "".join(f"<table:table-cell><text:p>{v}</text:p></table:table-cell>" for v in values)


def row(*values: str) -> str:
    return f"<table:table-row>{cells(*values)}</table:table-row>"


# --- detection (detect_kind reads the mimetype member) -------------------------------------
ODF_KINDS = {DocumentKind.ODT, DocumentKind.ODS, DocumentKind.ODP}


def _kind(data: bytes) -> DocumentKind | None:
    try:
        return detect_kind(data, "upload")
    except UnsupportedDocumentType:
        return None


def test_odf_kind_reads_the_mimetype_member() -> None:
    assert _kind(odt("<text:p>x</text:p>")) is DocumentKind.ODT
    assert _kind(ods("")) is DocumentKind.ODS
    assert _kind(odp("")) is DocumentKind.ODP
    template = package("presentation-template", content("", "presentation"))
    assert _kind(template) is DocumentKind.ODP
    lax = package("spreadsheet", content("", "spreadsheet"), mimetype_first=False)
    assert _kind(lax) is DocumentKind.ODS


def test_odf_kind_is_none_for_other_files() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("word/document.xml", "<w:document/>")
    assert _kind(buffer.getvalue()) not in ODF_KINDS
    assert _kind(package("graphics", content("", "drawing"))) not in ODF_KINDS
    assert _kind(b"%PDF-1.7 ...") not in ODF_KINDS
    assert _kind(b"PK\x03\x04 truncated") not in ODF_KINDS


# --- ODT -----------------------------------------------------------------------------------


def test_odt_headings_paragraphs_and_spacing() -> None:
    data = odt(
        '<text:h text:outline-level="1">Intro<text:soft-page-break/></text:h>'
        '<text:p>Hello<text:s text:c="3"/>world<text:tab/>tab<text:line-break/>next '
        "<text:soft-page-break/>line\n  wrapped</text:p>"
        "<text:soft-page-break/>"
        '<text:p text:style-name="P1">A <text:span>styled</text:span> word</text:p>'
        "<text:p>  </text:p>"
        '<text:h text:outline-level="2">Later</text:h><text:p>End</text:p>',
        title="Travel policy",
    )
    document = parse_odt(data, "upload")
    assert document.title == "Travel policy"
    assert len(document.pages) == 1 and document.pages[0].label == ""
    assert list(document.pages[0].blocks) == [
        Block("Intro", is_heading=True),
        Block("Hello world tab\nnext line wrapped"),
        Block("A styled word"),
        Block("Later", is_heading=True),
        Block("End"),
    ]


def test_odt_title_falls_back_to_the_first_heading_then_the_file_name() -> None:
    body = '<text:p>x</text:p><text:h text:outline-level="1">Real title</text:h>'
    assert parse_odt(odt(body, title="Untitled"), "upload").title == "Real title"
    assert parse_odt(odt("<text:p>x</text:p>"), "upload").title == "upload"


def test_odt_title_style_paragraph_is_a_heading() -> None:
    styles = (
        '<style:style style:name="P7" style:family="paragraph" style:parent-style-name="Title"/>'
    )
    data = odt('<text:p text:style-name="P7">Annual report</text:p><text:p>Body</text:p>', styles)
    document = parse_odt(data, "upload")
    assert document.pages[0].blocks[0] == Block("Annual report", is_heading=True)
    assert document.title == "Annual report"


def test_odt_lists_are_paragraphs() -> None:
    data = odt(
        "<text:list><text:list-item><text:p>One</text:p></text:list-item>"
        "<text:list-item><text:p>Two</text:p><text:list><text:list-item>"
        "<text:p>Two a</text:p></text:list-item></text:list></text:list-item>"
        "<text:list-header><text:p>Aside</text:p></text:list-header></text:list>"
        "<text:section><text:p>In a section</text:p></text:section>"
    )
    blocks = parse_odt(data, "upload").pages[0].blocks
    assert [b.text for b in blocks] == ["One", "Two", "Two a", "Aside", "In a section"]
    assert not any(b.is_heading for b in blocks)


def test_odt_notes_follow_their_paragraph_and_comments_and_deletions_are_left_out() -> None:
    data = odt(
        "<text:tracked-changes><text:changed-region><text:deletion>"
        "<text:p>deleted words</text:p></text:deletion></text:changed-region>"
        "</text:tracked-changes>"
        "<text:p>Claim<text:note><text:note-citation>1</text:note-citation><text:note-body>"
        "<text:p>Source of the claim.</text:p></text:note-body></text:note> stands."
        "<office:annotation><text:p>reviewer comment</text:p></office:annotation></text:p>"
        "<text:p><draw:frame><draw:text-box><text:p>Boxed</text:p></draw:text-box>"
        "</draw:frame></text:p>"
        "<text:table-of-content><text:table-of-content-source>"
        "<text:index-title-template>Contents</text:index-title-template>"
        "</text:table-of-content-source><text:index-body><text:p>Claim 1</text:p>"
        "</text:index-body></text:table-of-content>"
    )
    texts = [b.text for b in parse_odt(data, "upload").pages[0].blocks]
    assert texts == ["Claim stands.", "Source of the claim.", "Boxed", "Claim 1"]


HEADER_TABLE = (
    '<table:table table:name="Table1"><table:table-column table:number-columns-repeated="3"/>'
    "<table:table-header-rows>"
    '<table:table-row><table:table-cell table:number-rows-spanned="2"><text:p>Region</text:p>'
    '</table:table-cell><table:table-cell table:number-columns-spanned="2"><text:p>2025'
    "</text:p></table:table-cell><table:covered-table-cell/></table:table-row>"
    "<table:table-row><table:covered-table-cell/>"
    f"{cells('Q1', 'Q2')}</table:table-row>"
    "</table:table-header-rows>"
    f"{row('North', '10', '20')}"
    '<table:table-row table:number-rows-repeated="2">'
    f"{cells('South')}"
    '<table:table-cell table:number-columns-repeated="2"><text:p>5</text:p></table:table-cell>'
    "</table:table-row>"
    '<table:table-row table:number-rows-repeated="40">'
    '<table:table-cell table:number-columns-repeated="3"/></table:table-row>'
    "</table:table>"
)


def test_odt_table_with_header_rows_merged_and_repeated_cells() -> None:
    data = odt(f'<text:h text:outline-level="1">Sales</text:h>{HEADER_TABLE}')
    blocks = parse_odt(data, "upload").pages[0].blocks
    context = "Sales\n| Region | 2025 Q1 | 2025 Q2 |\n| --- | --- | --- |"
    assert list(blocks[1:]) == [
        Block("| Region | 2025 Q1 | 2025 Q2 |", is_heading=True, table=context),
        Block("| North | 10 | 20 |", table=context),
        Block("| South | 5 | 5 |", table=context),
        Block("| South | 5 | 5 |", table=context),
    ]


def test_odt_table_caption_is_its_name_and_a_header_is_guessed() -> None:
    table = f'<table:table table:name="Prices">{row("Plan", "Price")}{row("Silver", "500")}'
    data = odt(f"<text:p>Intro</text:p>{table}</table:table>")
    document = parse_odt(data, "upload")
    context = "Prices\n| Plan | Price |\n| --- | --- |"
    assert document.pages[0].blocks[1:] == (
        Block("| Plan | Price |", is_heading=True, table=context),
        Block("| Silver | 500 |", table=context),
    )
    assert document.title == "upload"  # a table's header row is no title
    numbers = f'<table:table table:name="Table2">{row("1", "2")}{row("3", "4")}</table:table>'
    blocks = parse_odt(odt(numbers), "upload").pages[0].blocks
    assert blocks == (Block("| 1 | 2 |"), Block("| 3 | 4 |"))  # no header, no default name


# --- ODS -----------------------------------------------------------------------------------


def test_ods_sheets_are_labelled_pages_of_table_rows() -> None:
    data = ods(
        f'<table:table table:name="Prices">{row("Plan", "Price")}{row("Silver", "500")}'
        f"{row('Gold', '900')}</table:table>"
        '<table:table table:name="Empty"><table:table-row><table:table-cell/></table:table-row>'
        "</table:table>"
        f'<table:table table:name="Notes">{row("Renewal in May")}</table:table>',
        title="Price list",
    )
    document = parse_ods(data, "upload")
    assert document.title == "Price list"
    assert [(p.number, p.label) for p in document.pages] == [
        (1, "Sheet “Prices”"),
        (2, "Sheet “Notes”"),
    ]
    context = "Prices\n| Plan | Price |\n| --- | --- |"
    assert document.pages[0].blocks == (
        Block("| Plan | Price |", is_heading=True, table=context),
        Block("| Silver | 500 |", table=context),
        Block("| Gold | 900 |", table=context),
    )
    # A lone value is a sheet's note, not a table of one cell (as in XLSX).
    assert document.pages[1].blocks == (Block("Renewal in May"),)


def test_ods_header_rows_repeats_and_merged_cells() -> None:
    data = ods(HEADER_TABLE.replace("Table1", "Sales"))
    blocks = parse_ods(data, "upload").pages[0].blocks
    context = "Sales\n| Region | 2025 Q1 | 2025 Q2 |\n| --- | --- | --- |"
    assert [b.text for b in blocks[1:]] == ["| North | 10 | 20 |"] + ["| South | 5 | 5 |"] * 2
    assert {b.table for b in blocks} == {context}


def test_ods_cells_read_their_displayed_text_never_a_formula() -> None:
    data = ods(
        '<table:table table:name="S">'
        f"{row('Item', 'Share', 'Total', 'Date')}"
        "<table:table-row>"
        f"{cells('Rent')}"
        '<table:table-cell office:value-type="percentage" office:value="0.5">'
        "<text:p>50 %</text:p></table:table-cell>"
        '<table:table-cell table:formula="of:=[.B2]*1000" office:value-type="float" '
        'office:value="500"/>'
        '<table:table-cell office:value-type="date" office:date-value="2025-03-01"/>'
        "</table:table-row></table:table>"
    )
    blocks = parse_ods(data, "upload").pages[0].blocks
    assert [b.text for b in blocks[1:]] == ["| Rent | 50 % | 500 | 2025-03-01 |"]
    assert "[.B2]" not in blocks[0].text + blocks[1].text


def test_ods_repeated_filled_cells_stop_at_max_columns() -> None:
    data = ods(
        '<table:table table:name="Wide"><table:table-row>'
        '<table:table-cell table:number-columns-repeated="10000"><text:p>x</text:p>'
        "</table:table-cell><table:table-cell><text:p>lost</text:p></table:table-cell>"
        "</table:table-row></table:table>"
    )
    (block,) = parse_ods(data, "upload").pages[0].blocks
    assert block.text == "| " + " | ".join(["x"] * MAX_COLUMNS) + " |"


def test_ods_a_million_repeated_empty_rows_take_milliseconds() -> None:
    data = ods(
        f'<table:table table:name="Big">{row("Plan", "Price")}{row("Silver", "500")}'
        '<table:table-row table:number-rows-repeated="1048574">'
        '<table:table-cell table:number-columns-repeated="16384"/></table:table-row>'
        '<table:table-row table:number-rows-repeated="1048576">'
        '<table:table-cell table:number-columns-repeated="1024"/></table:table-row>'
        "</table:table>"
    )
    started = time.perf_counter()
    document = parse_ods(data, "upload")
    assert time.perf_counter() - started < 0.5
    assert [b.text for b in document.pages[0].blocks] == ["| Plan | Price |", "| Silver | 500 |"]


def test_ods_more_than_a_million_cells_fails_fast() -> None:
    data = ods(
        '<table:table table:name="Bomb"><table:table-row table:number-rows-repeated="1048576">'
        '<table:table-cell table:number-columns-repeated="16384"><text:p>1</text:p>'
        "</table:table-cell></table:table-row></table:table>"
    )
    started = time.perf_counter()
    with pytest.raises(ParseError, match=r"more than 1,000,000 filled table cells"):
        parse_ods(data, "upload")
    assert time.perf_counter() - started < 0.5


def test_ods_rows_of_a_table_nested_in_a_cell_stay_in_the_cell() -> None:
    nested = f"<table:table>{row('a', 'b')}</table:table>"
    data = ods(
        f'<table:table table:name="S">{row("Key", "Value")}<table:table-row>{cells("k")}'
        f"<table:table-cell>{nested}</table:table-cell></table:table-row></table:table>"
    )
    blocks = parse_ods(data, "upload").pages[0].blocks
    assert [b.text for b in blocks] == ["| Key | Value |", "| k | a b |"]


# --- ODP -----------------------------------------------------------------------------------


def frame(text: str, cls: str = "outline") -> str:
    return (
        f'<draw:frame presentation:class="{cls}"><draw:text-box>{text}</draw:text-box></draw:frame>'
    )


def test_odp_slides_titles_shapes_tables_and_notes() -> None:
    slide1 = (
        '<draw:page draw:name="page1">'
        + frame(
            "<text:list><text:list-item><text:p>First point</text:p></text:list-item></text:list>"
        )
        + frame("<text:p>Budget <text:span>2025</text:span></text:p>", "title")
        + "<draw:g><draw:custom-shape><text:p>In a group</text:p></draw:custom-shape></draw:g>"
        + f"<draw:frame><table:table>{row('Item', 'Cost')}{row('Rent', '500')}</table:table>"
        "</draw:frame>" + '<draw:frame><draw:image xlink:href="Pictures/1.png"><text:p>alt</text:p>'
        "</draw:image></draw:frame>"
        + "<presentation:notes><draw:page-thumbnail/>"
        + frame("<text:p>Say hello.</text:p><text:p>Then the budget.</text:p>", "notes")
        + "</presentation:notes></draw:page>"
    )
    slide2 = (
        '<draw:page draw:name="page2">'
        + frame("", "title")
        + frame("<text:p>Confidential</text:p>", "footer")
        + frame("<text:p><text:page-number>2</text:page-number></text:p>", "page-number")
        + "</draw:page>"
    )
    slide3 = '<draw:page draw:name="page3">' + frame("<text:p>Thanks</text:p>") + "</draw:page>"
    body = (slide1 + slide2 + slide3).replace(
        "<draw:image ", '<draw:image xmlns:xlink="http://www.w3.org/1999/xlink" '
    )
    document = parse_odp(odp(body), "upload")
    table = "Budget 2025\n| Item | Cost |\n| --- | --- |"
    assert document.title == "Budget 2025"
    assert [(p.number, p.label) for p in document.pages] == [
        (1, "Slide 1: Budget 2025"),
        (2, "Slide 2"),
        (3, "Slide 3"),
    ]
    assert list(document.pages[0].blocks) == [
        Block("Budget 2025", is_heading=True),
        Block("First point"),
        Block("In a group"),
        Block("| Item | Cost |", is_heading=True, table=table),
        Block("| Rent | 500 |", table=table),
        Block("Notes: Say hello.\nThen the budget."),
    ]
    assert document.pages[1].blocks == ()
    assert document.pages[2].blocks == (Block("Thanks"),)


def test_hidden_sheets_and_slides_are_read_and_labelled() -> None:
    styles = (
        '<style:style style:name="ta2" style:family="table">'
        '<style:table-properties table:display="false"/></style:style>'
        '<style:style style:name="dp2" style:family="drawing-page">'
        '<style:drawing-page-properties presentation:visibility="hidden"/></style:style>'
    )
    sheets = (
        f'<table:table table:name="Shown">{row("a")}</table:table>'
        f'<table:table table:name="Lookup" table:style-name="ta2">{row("b")}</table:table>'
    )
    data = package("spreadsheet", content(sheets, "spreadsheet", styles))
    labels = [page.label for page in parse_ods(data, "upload").pages]
    assert labels == ["Sheet “Shown”", "Sheet “Lookup” (hidden)"]
    slides = (
        '<draw:page draw:style-name="dp2">'
        + frame("<text:p>Backup</text:p>", "title")
        + '</draw:page><draw:page draw:style-name="dp2"/>'
    )
    data = package("presentation", content(slides, "presentation", styles))
    labels = [page.label for page in parse_odp(data, "upload").pages]
    assert labels == ["Slide 1 (hidden): Backup", "Slide 2 (hidden)"]


def test_odp_more_than_max_slides_is_refused() -> None:
    data = odp("<draw:page/>" * (MAX_SLIDES + 1))
    with pytest.raises(ParseError, match=r"more than 5,000 slides"):
        parse_odp(data, "upload")


# --- Hostile and broken packages -------------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "make", "fmt"),
    [(parse_odt, odt, "ODT"), (parse_ods, ods, "ODS"), (parse_odp, odp, "ODP")],
)
def test_encrypted_packages_are_refused(
    parse: Callable[[bytes, str], ParsedDocument], make: Callable[..., bytes], fmt: str
) -> None:
    data = make("", manifest_extra=ENCRYPTION)
    with pytest.raises(ParseError) as error:
        parse(data, "upload")
    assert str(error.value) == f"the {fmt} is encrypted; upload an unprotected copy"


def test_a_zip_password_is_refused_as_encryption() -> None:
    data = bytearray(odt("<text:p>secret</text:p>"))
    # Mark content.xml as encrypted with a ZIP password (zipfile cannot write such a part):
    # bit 0 of the flags in its local header and in its central directory entry.
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = 0
        while (start := data.find(signature, start)) >= 0:
            name_at = start + (30 if flags_at == 6 else 46)
            if data[name_at : name_at + 11] == b"content.xml":
                data[start + flags_at] |= 0x1
            start += 4
    with pytest.raises(
        ParseError, match=r"^the ODT is protected by a password; upload an unprotected copy$"
    ):
        parse_odt(bytes(data), "upload")


def test_whole_package_encryption_is_refused() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", MIME + "text")
        archive.writestr("encrypted-package", b"\x93\x11 ciphertext")
    with pytest.raises(ParseError, match=r"^the ODT is encrypted; upload an unprotected copy$"):
        parse_odt(buffer.getvalue(), "upload")


BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    '<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
    '<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>'
)


def test_billion_laughs_is_refused_by_the_archive_check() -> None:
    hostile = BILLION_LAUGHS + content("<text:p>&lol3;</text:p>").split("?>", 1)[1]
    with pytest.raises(ParseError, match=r"^the ODT contains XML entity declarations, refused$"):
        parse_odt(package("text", hostile), "upload")


def test_a_dtd_pushed_past_the_archive_check_is_refused_by_the_parser() -> None:
    comment = "<!--" + "x" * 70_000 + "-->"
    hostile = comment + BILLION_LAUGHS.split("?>", 1)[1] + content("<text:p>&lol3;</text:p>")
    hostile = hostile.replace('<?xml version="1.0" encoding="UTF-8"?>', "")
    with pytest.raises(ParseError, match=r"^the ODS contains XML entity declarations, refused$"):
        parse_ods(package("spreadsheet", hostile), "upload")


def test_broken_xml_and_deep_nesting_have_reasons() -> None:
    with pytest.raises(ParseError, match=r"^the ODT is damaged \(content.xml is not well-formed"):
        parse_odt(package("text", content("<text:p>open")), "upload")
    deep = "<text:section>" * 300 + "<text:p>x</text:p>" + "</text:section>" * 300
    with pytest.raises(ParseError, match=r"nested more than 200 levels deep"):
        parse_odt(odt(deep), "upload")


def test_nesting_just_under_the_limit_is_read() -> None:
    # document-content, body, text: 3 levels; 90 sections, the paragraph, 100 spans: 194.
    spans = "<text:span>" * 100 + "deep" + "</text:span>" * 100
    sections = "<text:section>" * 90 + f"<text:p>{spans}</text:p>" + "</text:section>" * 90
    assert parse_odt(odt(sections), "upload").pages[0].blocks == (Block("deep"),)


def test_a_package_without_content_is_refused() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", MIME + "text")
    with pytest.raises(ParseError, match=r"^not a valid ODT file \(content.xml is missing\)$"):
        parse_odt(buffer.getvalue(), "upload")


# --- ODS laid out as XLSX sheets are (tables.sheet_blocks) ---------------------------------


def typed(kind: str, value: str) -> str:
    return (
        f'<table:table-cell office:value-type="{kind}" office:value="{value}">'
        f"<text:p>{value}</text:p></table:table-cell>"
    )


def test_ods_title_blank_row_and_a_merged_two_row_header() -> None:
    """A title in A1 over a blank row, then "Region" merged down over a year merged
    across its quarters: the title is the caption, both header rows the header."""
    sheet = (
        '<table:table table:name="Sales">'
        f"{row('Sales by region')}"
        "<table:table-row><table:table-cell/></table:table-row>"
        '<table:table-row><table:table-cell table:number-rows-spanned="2"><text:p>Region'
        '</text:p></table:table-cell><table:table-cell table:number-columns-spanned="2">'
        "<text:p>2025</text:p></table:table-cell><table:covered-table-cell/></table:table-row>"
        f"<table:table-row><table:covered-table-cell/>{cells('Q1', 'Q2')}</table:table-row>"
        f"<table:table-row>{cells('North')}{typed('float', '10')}{typed('float', '20')}"
        "</table:table-row></table:table>"
    )
    blocks = parse_ods(ods(sheet), "upload").pages[0].blocks
    context = "Sales — Sales by region\n| Region | 2025 Q1 | 2025 Q2 |\n| --- | --- | --- |"
    assert list(blocks) == [
        Block("| Region | 2025 Q1 | 2025 Q2 |", is_heading=True, table=context),
        Block("| North | 10 | 20 |", table=context),
    ]


def test_ods_typed_numbers_are_data_and_text_typed_years_labels() -> None:
    numbers = f'<table:table table:name="N"><table:table-row>{typed("float", "2024")}'
    numbers += f"{typed('float', '2025')}</table:table-row>{row('a', 'b')}</table:table>"
    assert [b.is_heading for b in parse_ods(ods(numbers), "u").pages[0].blocks] == [False] * 2
    years = f'<table:table table:name="Y"><table:table-row>{typed("string", "Region")}'
    years += f"{typed('string', '2025')}</table:table-row>{row('North', '10')}</table:table>"
    first = parse_ods(ods(years), "u").pages[0].blocks[0]
    assert (first.text, first.is_heading) == ("| Region | 2025 |", True)


def test_ods_covered_cells_count_towards_the_cell_limit() -> None:
    data = ods(
        '<table:table table:name="Bomb"><table:table-row table:number-rows-repeated="3">'
        '<table:table-cell table:number-columns-spanned="200" table:number-rows-spanned="9">'
        "<text:p>x</text:p></table:table-cell>"
        '<table:covered-table-cell table:number-columns-repeated="199"/></table:table-row>'
        + (
            "<table:table-row>"
            '<table:covered-table-cell table:number-columns-repeated="200"/></table:table-row>'
        )
        * 6000
        + "</table:table>"
    )
    started = time.perf_counter()
    with pytest.raises(ParseError, match=r"more than 1,000,000 filled table cells"):
        parse_ods(data, "upload")
    assert time.perf_counter() - started < 2
