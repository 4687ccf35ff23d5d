"""DOCX through python-docx (MIT), after checks that keep XML and ZIP tricks out.

python-docx reads Word's XML with lxml (no DTDs, no entities once ``check_archive`` has
refused them) and gives the body's paragraphs and tables in document order; it is the
maintained, permissively licensed reader of the format.

Tables become rows under a header (``retrieval/parsers/tables.py``). The header is the
rows Word marks "repeat as header row", else the first row when it reads as one. Merged
cells are read from the XML grid: a cell merged across columns names each of them in the
header but is written once in a body row; a cell merged down ("Silver" for three rows) is
repeated in each row, so every row says what it is about. A table nested in a cell is
flattened into that cell's text. The caption is a paragraph styled "Caption" just before
or after the table, else the nearest heading above it.

Limits: at most ``MAX_COLUMNS`` grid columns per row are read (a crafted gridSpan cannot
make a row of a million cells); content controls and tracked insertions that wrap whole
paragraphs or cells are skipped, as python-docx skips them.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from typing import Any

import docx
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml.ns import qn
from docx.table import Table
from docx.text.paragraph import Paragraph

from retrieval.parsers.office_archive import check_archive
from retrieval.parsers.tables import MAX_COLUMNS, looks_like_header, table_blocks
from retrieval.parsers.text import clean_text, single_page
from retrieval.parsers.titles import named_title
from retrieval.types import Block, ParsedDocument

_OFF = {"0", "false", "off"}  # how OOXML spells a switched-off on/off property


def parse_docx(data: bytes, fallback_title: str) -> ParsedDocument:
    check_archive(data)  # bombs and DTDs are refused before python-docx reads anything
    document = docx.Document(io.BytesIO(data))
    blocks = _blocks(list(document.iter_inner_content()), _Styles(document))
    title = named_title(document.core_properties.title or "")  # not "Document1"
    if not title:
        title = next((b.text for b in blocks if b.is_heading and not b.table), fallback_title)
    return single_page(title, blocks)


def _blocks(items: Sequence[Paragraph | Table], styles: _Styles) -> list[Block]:
    blocks: list[Block] = []
    heading = ""  # the nearest heading above: a table's caption when it has none of its own
    used: set[int] = set()  # caption paragraphs already given to a table
    for index, item in enumerate(items):
        if isinstance(item, Table):
            caption, at = _caption(items, index, styles, used)
            if at is not None:
                used.add(at)
                if at < index and blocks and blocks[-1].text == caption:
                    blocks.pop()  # it travels with every row instead
            blocks.extend(_table_blocks(item, caption or heading))
        elif index not in used:
            text = _paragraph_text(item)
            if text:
                is_heading = styles.is_heading(item)
                blocks.append(Block(text, is_heading=is_heading))
                heading = text if is_heading else heading
    return blocks


def _paragraph_text(paragraph: Paragraph) -> str:
    return " ".join(clean_text(paragraph.text).split())


def _caption(
    items: Sequence[Paragraph | Table], index: int, styles: _Styles, used: set[int]
) -> tuple[str, int | None]:
    """The text of the Caption-styled paragraph just before the table (Word's default
    place) or just after it, and where it stands; ("", None) when there is none. One
    between two tables belongs to the second (captions above are the rule)."""
    after = index + 1
    if after + 1 < len(items) and isinstance(items[after + 1], Table):
        after = -1
    for at in (index - 1, after):
        if 0 <= at < len(items) and at not in used:
            item = items[at]
            if isinstance(item, Paragraph) and styles.is_caption(item):
                text = _paragraph_text(item)
                if text:
                    return text, at
    return "", None


class _Styles:
    """Which paragraphs are headings or captions, by their style's name, the styles read once.

    ``Paragraph.style`` scans every style of the document for each paragraph (about 2 ms
    with Word's 160 built-in styles): 50,000 paragraphs took minutes. This resolves the
    style id the way python-docx does (unknown ids and none mean the default style).
    """

    def __init__(self, document: Any):
        styles = document.styles
        names = {
            style.style_id: (style.name or "")
            for style in styles
            if style.type == WD_STYLE_TYPE.PARAGRAPH
        }
        default = styles.default(WD_STYLE_TYPE.PARAGRAPH)
        self._default = (default.name or "") if default is not None else ""
        self._names = names

    def _name(self, paragraph: Paragraph) -> str:
        style_id = paragraph._p.style  # the w:pStyle value; python-docx has no public getter
        return self._names.get(style_id, self._default) if style_id else self._default

    def is_heading(self, paragraph: Paragraph) -> bool:
        return self._name(paragraph).startswith(("Heading", "Title"))

    def is_caption(self, paragraph: Paragraph) -> bool:
        return self._name(paragraph).lower() == "caption"


def _table_blocks(table: Table, caption: str) -> list[Block]:
    grid = list(_grid(table._tbl))
    if not grid:
        return []
    marked = _marked_header_rows(table._tbl)
    if marked:
        header_rows = marked
    else:
        texts = [[cell.text for cell in row] for row in grid]
        header_rows = 1 if looks_like_header(texts[0], texts[1:]) else 0
    rows = [
        [cell.text if index < header_rows or not cell.spanned else "" for cell in row]
        for index, row in enumerate(grid)
    ]
    return table_blocks(rows, caption=caption, header_rows=header_rows)


class _Cell:
    """A grid position's text; ``spanned`` when a cell to its left merged across it."""

    __slots__ = ("spanned", "text")

    def __init__(self, text: str, spanned: bool = False):
        self.text = text
        self.spanned = spanned


def _grid(tbl: Any) -> Iterator[list[_Cell]]:
    """Each row as one ``_Cell`` per grid column, read from the XML, not ``row.cells``:
    python-docx finds the top of a vertical merge by walking up row by row, recursively,
    which is quadratic and overflows the stack on a merge hundreds of rows tall. Here the
    text of each column's open merge is kept as the rows go by."""
    above: dict[int, str] = {}  # grid column -> text of the vertical merge open there
    for tr in tbl.tr_lst:
        column = _grid_before(tr)
        row = [_Cell("") for _ in range(min(column, MAX_COLUMNS))]
        for tc in tr.tc_lst:
            if column >= MAX_COLUMNS:
                break
            span = _grid_span(tc)
            if tc.vMerge == "continue":
                text = above.get(column, "")
            else:
                text = _cell_text(tc)
                if tc.vMerge == "restart":
                    above[column] = text
                else:
                    above.pop(column, None)
            for offset in range(min(span, MAX_COLUMNS - column)):
                row.append(_Cell(text, spanned=offset > 0))
            column += span
        yield row


def _grid_before(tr: Any) -> int:
    """Empty grid columns before a row's first cell; 0 when malformed (a crafted file)."""
    try:
        return max(0, int(tr.grid_before))
    except (ValueError, TypeError):
        return 0


def _grid_span(tc: Any) -> int:
    """Grid columns a cell spans; 1 when malformed (a crafted file)."""
    try:
        return max(1, int(tc.grid_span))
    except (ValueError, TypeError):
        return 1


def _cell_text(tc: Any) -> str:
    """All the paragraphs of a cell, those of tables nested in it included, in order."""
    return " ".join(clean_text(p.text) for p in tc.xpath(".//w:p"))


def _marked_header_rows(tbl: Any) -> int:
    """How many rows at the top Word repeats on each page as the table's header."""
    count = 0
    for tr in tbl.tr_lst:
        marks = tr.xpath("./w:trPr/w:tblHeader")
        if not marks or marks[0].get(qn("w:val"), "true").lower() in _OFF:
            break
        count += 1
    return count
