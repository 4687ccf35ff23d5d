"""Tables stay tables: the shared table model, and tables in DOCX, HTML and PDF files."""

from __future__ import annotations

import io
import time
from collections.abc import Sequence

import docx
import pytest
from docx.oxml import OxmlElement
from docx.oxml.ns import qn

from retrieval.parsers import parse_document
from retrieval.parsers.docx import parse_docx
from retrieval.parsers.html import parse_html
from retrieval.parsers.pdf import parse_pdf
from retrieval.parsers.pdf_tables import _agrees, ruled_pages
from retrieval.parsers.tables import (
    MAX_COLUMNS,
    cell_text,
    flatten_header,
    looks_like_header,
    table_blocks,
)
from retrieval.types import Block, DocumentKind
from tests.documents import make_pdf, pdf_file


def _rows(blocks: Sequence[Block]) -> list[str]:
    """The body rows of the tables among ``blocks`` (a table with neither caption nor
    header has no context: its rows are known by their Markdown)."""
    return [b.text for b in blocks if b.text.startswith("| ") and not b.is_heading]


def _contexts(blocks: Sequence[Block]) -> list[str]:
    return list(dict.fromkeys(b.table for b in blocks if b.table is not None))


def _context(caption: str, header: list[str]) -> str:
    lines = [caption] if caption else []
    return "\n".join([*lines, "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)])


# --- the table model (retrieval/parsers/tables.py) ---------------------------------------


def test_flatten_header_joins_a_merged_cell_with_the_cells_under_it() -> None:
    header = [["Grade", "2025", "2025"], ["Grade", "Q1", "Q2"]]
    assert flatten_header(header) == ["Grade", "2025 Q1", "2025 Q2"]


def test_flatten_header_pads_short_rows_and_skips_empty_parts() -> None:
    assert flatten_header([["Plan", "", "Cost"], ["", "Seats"]]) == ["Plan", "Seats", "Cost"]
    assert flatten_header([]) == []


def test_rows_carry_caption_and_header_and_empty_cells_keep_their_column() -> None:
    blocks = table_blocks(
        [["Grade", "Days", "Notes"], ["Silver", None, "x"], ["Gold", "30", ""]],
        caption="Leave  allowances",
    )
    assert _rows(blocks) == ["| Silver |  | x |", "| Gold | 30 |  |"]
    assert _contexts(blocks) == [_context("Leave allowances", ["Grade", "Days", "Notes"])]


def test_columns_empty_in_header_and_every_row_are_dropped() -> None:
    blocks = table_blocks([["A", "", "B", ""], ["1", "", "2", None]])
    assert _rows(blocks) == ["| 1 | 2 |"]
    assert _contexts(blocks) == [_context("", ["A", "B"])]


def test_short_rows_are_padded_to_the_table_width() -> None:
    blocks = table_blocks([["A", "B", "C"], ["1"], ["2", "3"]])
    assert _rows(blocks) == ["| 1 |  |  |", "| 2 | 3 |  |"]


def test_pipes_are_escaped_and_cells_are_one_line() -> None:
    assert cell_text("a | b\n  c") == "a \\| b c"
    blocks = table_blocks([["Op", "Means"], ["a|b", "or"]])
    assert _rows(blocks) == ["| a\\|b | or |"]


def test_no_header_rows_and_a_lone_row() -> None:
    blocks = table_blocks([["Silver", "500"], ["Gold", "600"]], header_rows=0, caption="Plans")
    assert _rows(blocks) == ["| Silver | 500 |", "| Gold | 600 |"]
    assert _contexts(blocks) == ["Plans"]
    assert _rows(table_blocks([["Only", "row"]])) == ["| Only | row |"]
    assert table_blocks([["", None], []]) == []


def test_cells_and_columns_are_bounded() -> None:
    blocks = table_blocks([["x" * 5000] + [str(n) for n in range(1000)]], header_rows=0)
    (row,) = _rows(blocks)
    assert row.count(" | ") == MAX_COLUMNS - 1
    assert len(row) < 5000 and "…" in row


def test_looks_like_header() -> None:
    assert looks_like_header(["Grade", "Days"], [["A", "30"]])
    assert not looks_like_header(["Grade", "Days"], [])  # nothing under it
    assert not looks_like_header(["Silver", "500"], [["Gold", "600"]])  # a number
    assert not looks_like_header(["Grade", ""], [["A", "30"]])  # an empty cell


# --- DOCX ------------------------------------------------------------------------------


def _saved(document: object) -> bytes:
    out = io.BytesIO()
    document.save(out)  # type: ignore[attr-defined]
    return out.getvalue()


def _fill(table: object, rows: list[list[str]]) -> None:
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            table.cell(r, c).text = value  # type: ignore[attr-defined]


def _mark_header(table: object, rows: int) -> None:
    for tr in table._tbl.tr_lst[:rows]:  # type: ignore[attr-defined]
        tr.get_or_add_trPr().append(OxmlElement("w:tblHeader"))


def _docx_blocks(data: bytes) -> tuple[Block, ...]:
    return parse_docx(data, "fallback").pages[0].blocks


def test_docx_marked_header_rows_merged_cells_and_nested_tables() -> None:
    built = docx.Document()
    built.add_heading("Allowances", level=1)
    table = built.add_table(rows=5, cols=3)
    _fill(
        table,
        [
            ["Grade", "2025", ""],
            ["", "Q1", "Q2"],
            ["Silver", "500", "30"],
            ["", "600", "40"],
            ["Total", "", "70"],
        ],
    )
    table.cell(0, 1).merge(table.cell(0, 2)).text = "2025"  # across the header
    table.cell(0, 0).merge(table.cell(1, 0)).text = "Grade"  # down the header
    table.cell(2, 0).merge(table.cell(3, 0)).text = "Silver"  # down the body
    table.cell(4, 0).merge(table.cell(4, 1)).text = "Total"  # across the body
    _mark_header(table, 2)
    inner = table.cell(3, 2).add_table(rows=1, cols=2)
    _fill(inner, [["nested a", "nested b"]])
    built.add_paragraph("After the table.")
    blocks = _docx_blocks(_saved(built))
    assert _rows(blocks) == [
        "| Silver | 500 | 30 |",
        "| Silver | 600 | 40 nested a nested b |",  # vMerge repeated, nested table flattened
        "| Total |  | 70 |",  # a gridSpan is written once in the body
    ]
    assert _contexts(blocks) == [_context("Allowances", ["Grade", "2025 Q1", "2025 Q2"])]
    assert blocks[0] == Block("Allowances", is_heading=True)
    assert blocks[-1] == Block("After the table.")


def test_docx_header_is_guessed_when_not_marked() -> None:
    built = docx.Document()
    _fill(built.add_table(rows=2, cols=2), [["Class", "Allowed"], ["Economy", "yes"]])
    _fill(built.add_table(rows=2, cols=2), [["Silver", "500"], ["Gold", "600"]])
    blocks = _docx_blocks(_saved(built))
    assert _rows(blocks) == ["| Economy | yes |", "| Silver | 500 |", "| Gold | 600 |"]
    assert _contexts(blocks) == [_context("", ["Class", "Allowed"])]  # the second has none


def test_docx_caption_paragraph_before_or_after_the_table() -> None:
    built = docx.Document()
    built.add_heading("Travel", level=1)
    built.add_paragraph("Table 1: Hotels", style="Caption")
    _fill(built.add_table(rows=2, cols=2), [["City", "Rate"], ["Paris", "180"]])
    built.add_paragraph("Between.")
    _fill(built.add_table(rows=2, cols=2), [["City", "Rate"], ["Rome", "150"]])
    built.add_paragraph("Table 2: More hotels", style="Caption")
    data = _saved(built)
    blocks = _docx_blocks(data)
    assert _contexts(blocks) == [
        _context("Table 1: Hotels", ["City", "Rate"]),
        _context("Table 2: More hotels", ["City", "Rate"]),
    ]
    texts = [b.text for b in blocks if b.table is None]
    assert texts == ["Travel", "Between."]  # captions travel with the rows instead
    assert parse_docx(data, "fallback").title == "Travel"


def test_docx_title_is_never_a_table_header() -> None:
    built = docx.Document()
    _fill(built.add_table(rows=2, cols=2), [["Class", "Allowed"], ["Economy", "yes"]])
    assert parse_docx(_saved(built), "fallback").title == "fallback"


def test_docx_crafted_spans_stay_bounded_and_fast() -> None:
    built = docx.Document()
    table = built.add_table(rows=3000, cols=2)
    _fill(table, [["Name", "Value"], ["Silver", "wide"]])
    for index, tr in enumerate(table._tbl.tr_lst[1:]):  # one vMerge 2,999 rows tall
        tr.tc_lst[0].vMerge = "continue" if index else "restart"
    span = OxmlElement("w:gridSpan")
    span.set(qn("w:val"), "1000000")
    table._tbl.tr_lst[1].tc_lst[1].get_or_add_tcPr().append(span)
    started = time.perf_counter()
    blocks = _docx_blocks(_saved(built))
    assert time.perf_counter() - started < 5
    rows = _rows(blocks)
    assert rows[0] == "| Silver | wide |"  # the crafted span adds no column of its own
    assert len(rows) == 2999 and all(row.startswith("| Silver |") for row in rows)


# --- HTML ------------------------------------------------------------------------------


def _html_blocks(html: str) -> tuple[Block, ...]:
    return parse_html(html, "fallback").pages[0].blocks


def test_html_thead_spans_and_caption() -> None:
    blocks = _html_blocks(
        "<h2>Prices</h2><table><caption>Plans</caption>"
        "<thead><tr><th rowspan=2>Plan</th><th colspan=2>2025</th></tr>"
        "<tr><th>Q1</th><th>Q2</th></tr></thead>"
        "<tr><td rowspan=2>Silver</td><td></td><td>30</td></tr>"
        "<tr><td colspan=2>n/a</td></tr>"
        "<tr><td>Gold</td><td>1<br>2</td><td><table><tr><td>in a</td><td>in b</td></tr>"
        "</table></td></tr></table><p>After.</p>"
    )
    assert _rows(blocks) == [
        "| Silver |  | 30 |",  # the empty cell keeps its column
        "| Silver | n/a |  |",  # rowspan repeated down, colspan written once
        "| Gold | 1 2 | in a in b |",  # a nested table is flattened into its cell
    ]
    assert _contexts(blocks) == [_context("Plans", ["Plan", "2025 Q1", "2025 Q2"])]
    assert blocks[0] == Block("Prices", is_heading=True)
    assert blocks[-1] == Block("After.")


def test_html_leading_th_rows_are_the_header_and_the_heading_is_the_caption() -> None:
    blocks = _html_blocks(
        "<h1>Leave</h1><table><tr><th>Grade</th><th>Days</th></tr>"
        "<tr><td>A</td><td>30</td></tr><tr><th>B</th><td>25</td></tr></table>"
    )
    assert _rows(blocks) == ["| A | 30 |", "| B | 25 |"]
    assert _contexts(blocks) == [_context("Leave", ["Grade", "Days"])]


def test_html_table_without_header_cells_has_no_header() -> None:
    blocks = _html_blocks(
        "<table><tr><td>Silver</td><td>500</td></tr><tr><td>Gold</td></tr></table>"
    )
    assert _rows(blocks) == ["| Silver | 500 |", "| Gold |  |"]
    assert _contexts(blocks) == []  # no caption, no heading, no header: no context


def test_html_title_is_never_a_table_header() -> None:
    document = parse_html("<table><tr><th>K</th><th>V</th></tr><tr><td>a</td><td>1</td></tr>", "x")
    assert document.title == "x"


@pytest.mark.parametrize(
    "html",
    [
        "<table role=presentation><tr><td><p>Left</p></td><td>Right</td></tr></table>",
        "<table><tr><td><p>Left</p></td></tr><tr><td>Right</td></tr></table>",  # one column
        "<table><tr><td><h2>Left</h2></td><td><p>Right</p></td></tr></table>",  # one row
    ],
)
def test_html_layout_tables_read_as_their_content(html: str) -> None:
    blocks = _html_blocks(html)
    assert [b.text for b in blocks] == ["Left", "Right"]
    assert all(b.table is None for b in blocks)


def test_html_layout_table_keeps_headings_and_inner_data_tables() -> None:
    blocks = _html_blocks(
        "<table><tr><td><h1>Rota</h1><p>Shifts.</p>"
        "<table><tr><th>Day</th><th>Who</th></tr><tr><td>Mon</td><td>Ann</td></tr></table>"
        "</td></tr></table>"
    )
    assert blocks[0] == Block("Rota", is_heading=True)
    assert blocks[1] == Block("Shifts.")
    assert _rows(blocks) == ["| Mon | Ann |"]
    assert _contexts(blocks) == [_context("Rota", ["Day", "Who"])]


def test_html_hostile_spans_and_nesting_are_bounded() -> None:
    html = (
        "<table><tr><th>K</th><th>V</th></tr>"
        '<tr><td colspan="99999999999999999999">wide</td><td rowspan=0>down</td></tr>'
        + "<tr><td>x</td></tr>" * 200
        + "</table>"
        + "<div>" * 20_000
        + "<p>deep</p>"
        + "</div>" * 20_000
    )
    started = time.perf_counter()
    blocks = _html_blocks(html)
    assert time.perf_counter() - started < 5
    rows = _rows(blocks)
    assert len(rows) == 201 and rows[0].startswith("| wide |")
    assert blocks[-1] == Block("deep")


# --- PDF -------------------------------------------------------------------------------


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _text(x: float, y: float, text: str, *, bold: bool = False) -> str:
    return f"BT /F{2 if bold else 1} 10 Tf {x} {y} Td ({_escape(text)}) Tj ET"


Cell = tuple[int, int]


def _table_ops(
    rows: list[list[str]],
    *,
    left: float,
    top: float,
    ruled: bool,
    no_rule_below: frozenset[Cell] = frozenset(),
    no_rule_left_of: frozenset[Cell] = frozenset(),
) -> list[str]:
    """A table with its cells' text; with ``ruled``, the rules around every cell, less
    those below and left of the (row, column) cells named (merged cells)."""
    width, height = 120, 20
    ops = []
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            x, y = left + c * width, top - r * height
            ops.append(_text(x + 4, y - height + 6, value))
            if not ruled:
                continue
            if (r, c) not in no_rule_below:
                ops.append(f"{x} {y - height} m {x + width} {y - height} l S")
            if (r, c) not in no_rule_left_of:
                ops.append(f"{x} {y} m {x} {y - height} l S")
            if r == 0:
                ops.append(f"{x} {y} m {x + width} {y} l S")
            if c == len(row) - 1:
                ops.append(f"{x + width} {y} m {x + width} {y - height} l S")
    return ops


def _pdf(pages: list[list[str]]) -> bytes:
    """A PDF whose pages draw the given content-stream operations (Helvetica)."""
    objects: list[bytes] = [
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold >>",
    ]
    pages_id = 2 + 2 * len(pages) + 1
    kids = []
    for ops in pages:
        stream = "\n".join(ops).encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        objects.append(
            b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] /Contents %d 0 R "
            b"/Resources << /Font << /F1 1 0 R /F2 2 0 R >> >> >>" % (pages_id, len(objects))
        )
        kids.append(b"%d 0 R" % len(objects))
    objects.append(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids)))
    objects.append(b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id)
    return pdf_file(objects, len(objects))


_GRADES = [["Grade", "Daily limit", "Hotel"], ["Silver", "500", "30"], ["Gold", "", "45"]]


def test_pdf_ruled_table_becomes_rows_in_page_order() -> None:
    prose = _text(50, 800, "Intro: staff travel rules apply to everyone.")
    page = [
        prose,
        _text(50, 760, "Table 1: Allowances by grade"),
        *_table_ops(_GRADES, left=50, top=740, ruled=True),
        _text(50, 640, "Closing words after the table."),
    ]
    data = _pdf([[_text(50, 800, "A first page of prose.")], page])
    document = parse_pdf(data, "fallback")
    assert [p.number for p in document.pages] == [1, 2]
    assert document.pages[0].blocks == (Block("A first page of prose."),)
    blocks = document.pages[1].blocks
    assert _rows(blocks) == ["| Silver | 500 | 30 |", "| Gold |  | 45 |"]
    assert _contexts(blocks) == [
        _context("Table 1: Allowances by grade", ["Grade", "Daily limit", "Hotel"])
    ]
    texts = [b.text for b in blocks if b.table is None]
    assert texts == [
        "Intro: staff travel rules apply to everyone. Table 1: Allowances by grade",
        "Closing words after the table.",
    ]
    assert blocks[-1].text == "Closing words after the table."  # below the table
    assert not any("Silver" in text for text in texts)  # table text is not repeated


def test_pdf_two_header_rows_under_a_merged_cell_and_a_bold_caption() -> None:
    rows = [["Region", "2025", ""], ["", "Q1", "Q2"], ["North", "5", "6"], ["South", "7", "8"]]
    page = [
        _text(50, 772, "Quarterly sales", bold=True),
        *_table_ops(
            rows,
            left=50,
            top=760,
            ruled=True,
            no_rule_below=frozenset({(0, 0)}),  # "Region" spans two rows
            no_rule_left_of=frozenset({(0, 2)}),  # "2025" spans two columns
        ),
    ]
    blocks = parse_pdf(_pdf([page]), "fallback").pages[0].blocks
    assert _rows(blocks) == ["| North | 5 | 6 |", "| South | 7 | 8 |"]
    assert _contexts(blocks) == [_context("Quarterly sales", ["Region", "2025 Q1", "2025 Q2"])]


def test_pdf_table_going_on_to_the_next_page_keeps_its_caption() -> None:
    first = [
        _text(50, 772, "Table 4: Grades"),
        *_table_ops(_GRADES, left=50, top=760, ruled=True),
    ]
    second = _table_ops([_GRADES[0], ["Bronze", "300", "20"]], left=50, top=800, ruled=True)
    document = parse_pdf(_pdf([first, second]), "fallback")
    header = ["Grade", "Daily limit", "Hotel"]
    for page in document.pages:
        assert _contexts(page.blocks) == [_context("Table 4: Grades", header)]
    assert _rows(document.pages[1].blocks) == ["| Bronze | 300 | 20 |"]


def test_pdf_pages_without_ruled_tables_keep_pypdf_text() -> None:
    unruled = [_text(50, 800, "Plain words."), *_table_ops(_GRADES, left=50, top=780, ruled=False)]
    framed = [_text(60, 780, "Framed words."), "40 700 m 500 700 l 500 800 l 40 800 l h S"]
    # A grid holding one note: ruled enough to be looked at, but no table of two rows and
    # two columns with text.
    note = _table_ops(
        [["Note: receipts are required.", ""], ["", ""]], left=50, top=780, ruled=True
    )
    data = _pdf([unruled, framed, note])
    assert ruled_pages(data, [1, 2, 3]) == [3]
    document = parse_pdf(data, "fallback")
    assert all(not b.text.startswith("|") for page in document.pages for b in page.blocks)
    assert "Silver" in document.pages[0].text
    assert document.pages[1].blocks == (Block("Framed words."),)
    assert document.pages[2].blocks == (Block("Note: receipts are required."),)


def test_pdf_without_tables_reads_as_before() -> None:
    data = make_pdf(["Intro line\nmore intro", "The refund limit is 300 euros."], title="Policy")
    document = parse_document(data, DocumentKind.PDF, "policy.pdf")
    assert [p.blocks for p in document.pages] == [
        (Block("Intro line more intro"),),
        (Block("The refund limit is 300 euros."),),
    ]


def test_ruled_pages_of_an_unreadable_file_are_none() -> None:
    assert ruled_pages(b"%PDF-1.4 garbage", [1]) == []


def test_a_pdfplumber_reading_that_loses_pypdfs_words_is_not_used() -> None:
    """pdfminer reads some pages' characters in reverse, or runs words together."""
    blocks = [Block("| Grade | Days |", table="Leave"), Block("| A | 30 |", table="Leave")]
    assert _agrees(blocks, "Leave Grade Days A 30")
    assert _agrees(blocks, "")
    assert not _agrees([Block("| edarG | syaD |")], "Grade Days A 30")
    assert _agrees([Block("| 公路技术 | 1.7 |")], "公路 技术 1.7")  # CJK, compared by character
