"""DOCX through python-docx, after checks that keep XML and ZIP tricks out."""

from __future__ import annotations

import io
from typing import Any

import docx
from docx.enum.style import WD_STYLE_TYPE
from docx.table import Table
from docx.text.paragraph import Paragraph

from retrieval.parsers.docx_archive import check_archive
from retrieval.parsers.text import clean_text, single_page
from retrieval.parsers.titles import named_title
from retrieval.types import Block, ParsedDocument


def parse_docx(data: bytes, fallback_title: str) -> ParsedDocument:
    check_archive(data)  # bombs and DTDs are refused before python-docx reads anything
    document = docx.Document(io.BytesIO(data))
    is_heading = _Headings(document)
    blocks: list[Block] = []
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            text = " ".join(clean_text(item.text).split())
            if text:
                blocks.append(Block(text, is_heading=is_heading(item)))
        elif isinstance(item, Table):
            blocks.extend(_table_rows(item))
    title = named_title(document.core_properties.title or "")  # not "Document1"
    if not title:
        title = next((b.text for b in blocks if b.is_heading), fallback_title)
    return single_page(title, blocks)


class _Headings:
    """Which paragraphs are headings, by their style's name, the styles read once.

    ``Paragraph.style`` scans every style of the document for each paragraph (about 2 ms
    with Word's 160 built-in styles): 50,000 paragraphs took minutes. This resolves the
    style id the way python-docx does (unknown ids and none mean the default style).
    """

    def __init__(self, document: Any):
        styles = document.styles
        self._by_id = {
            style.style_id: _heading_name(style.name)
            for style in styles
            if style.type == WD_STYLE_TYPE.PARAGRAPH
        }
        default = styles.default(WD_STYLE_TYPE.PARAGRAPH)
        self._default = default is not None and _heading_name(default.name)

    def __call__(self, paragraph: Paragraph) -> bool:
        style_id = paragraph._p.style  # the w:pStyle value; python-docx has no public getter
        return bool(self._by_id.get(style_id, self._default)) if style_id else self._default


def _heading_name(name: str | None) -> bool:
    return (name or "").startswith(("Heading", "Title"))


def _table_rows(table: Table) -> list[Block]:
    rows = []
    for row in table.rows:
        cells = [" ".join(cell.text.split()) for cell in row.cells]
        if any(cells):
            rows.append(Block(" | ".join(cells)))
    return rows
