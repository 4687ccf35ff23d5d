"""DOCX through python-docx, after checks that keep XML and ZIP tricks out."""

from __future__ import annotations

import io
import zipfile

import docx
from docx.table import Table
from docx.text.paragraph import Paragraph

from retrieval.parsers.errors import ParseError
from retrieval.parsers.text import clean_text, single_page
from retrieval.types import Block, ParsedDocument

MAX_UNCOMPRESSED_BYTES = 200 * 1024 * 1024
MAX_COMPRESSION_RATIO = 200
MAX_MEMBERS = 10_000
_DTD_SCAN_BYTES = 64 * 1024


def parse_docx(data: bytes, fallback_title: str) -> ParsedDocument:
    _check_archive(data)
    document = docx.Document(io.BytesIO(data))
    blocks: list[Block] = []
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            text = " ".join(clean_text(item.text).split())
            if text:
                blocks.append(Block(text, is_heading=_is_heading(item)))
        elif isinstance(item, Table):
            blocks.extend(_table_rows(item))
    title = (document.core_properties.title or "").strip()
    if not title:
        title = next((b.text for b in blocks if b.is_heading), fallback_title)
    return single_page(title, blocks)


def _check_archive(data: bytes) -> None:
    """Reject ZIP bombs and XML with DTDs (entity expansion) before any XML parser runs."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ParseError("not a valid DOCX file (the ZIP container is broken)") from exc
    with archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise ParseError("the DOCX archive has too many parts")
        total = sum(member.file_size for member in members)
        if total > MAX_UNCOMPRESSED_BYTES or total > MAX_COMPRESSION_RATIO * max(len(data), 1):
            raise ParseError("the DOCX expands to an implausible size (possible ZIP bomb)")
        if "word/document.xml" not in archive.namelist():
            raise ParseError("not a valid DOCX file (word/document.xml is missing)")
        for member in members:
            with archive.open(member) as part:
                head = part.read(_DTD_SCAN_BYTES)
            if _declares_dtd(head):
                raise ParseError("the DOCX contains XML entity declarations, refused")


def _declares_dtd(head: bytes) -> bool:
    """A DTD can only come before the root element, so the start of each part suffices.

    This is defence in depth: python-docx's XML parser does not resolve entities either.
    """
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        head = head.decode("utf-16", errors="ignore").encode()
    upper = head.upper()
    return b"<!DOCTYPE" in upper or b"<!ENTITY" in upper


def _is_heading(paragraph: Paragraph) -> bool:
    name = (paragraph.style.name if paragraph.style is not None else "") or ""
    return name.startswith(("Heading", "Title"))


def _table_rows(table: Table) -> list[Block]:
    rows = []
    for row in table.rows:
        cells = [" ".join(cell.text.split()) for cell in row.cells]
        if any(cells):
            rows.append(Block(" | ".join(cells)))
    return rows
