"""Plain text, Markdown and CSV: decoded text split into headings and paragraphs, and a
CSV file's rows into one table under its header (``retrieval/parsers/tables.py``)."""

from __future__ import annotations

import csv
import io
import re

from retrieval.parsers.errors import ParseError
from retrieval.parsers.tables import looks_like_header, table_blocks
from retrieval.types import Block, ParsedDocument, ParsedPage

_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BLANK_LINES = re.compile(r"\n\s*\n")
_ATX_HEADING = re.compile(r"#{1,6}[ \t]+(\S.*)")  # linear: trailing #s are stripped in code
_FENCE = re.compile(r"^\s*(```|~~~)")
_MAX_CSV_FIELD = 1_000_000


def decode_text(data: bytes) -> str:
    """Decode text by BOM, then UTF-8, then Windows-1252 (which never fails)."""
    for bom, encoding in (
        (b"\xef\xbb\xbf", "utf-8-sig"),
        (b"\xff\xfe", "utf-16"),
        (b"\xfe\xff", "utf-16"),
    ):
        if data.startswith(bom):
            return clean_text(data.decode(encoding, errors="replace"))
    try:
        return clean_text(data.decode("utf-8"))
    except UnicodeDecodeError:
        return clean_text(data.decode("cp1252", errors="replace"))


def clean_text(text: str) -> str:
    """Normalise newlines and drop control characters that only cause trouble downstream."""
    return _CONTROL_CHARS.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def paragraphs(text: str) -> list[Block]:
    """Blocks separated by blank lines, each stripped of surrounding whitespace."""
    return [Block(part.strip()) for part in _BLANK_LINES.split(text) if part.strip()]


def single_page(title: str, blocks: list[Block]) -> ParsedDocument:
    return ParsedDocument(title=title, pages=(ParsedPage(number=1, blocks=tuple(blocks)),))


def parse_plain_text(text: str, fallback_title: str) -> ParsedDocument:
    return single_page(fallback_title, paragraphs(text))


def parse_markdown(text: str, fallback_title: str) -> ParsedDocument:
    """ATX headings become heading blocks; fenced code is never split at a ``#`` line."""
    blocks: list[Block] = []
    pending: list[str] = []
    in_fence = False

    def flush() -> None:
        blocks.extend(paragraphs("\n".join(pending)))
        pending.clear()

    for line in text.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else _ATX_HEADING.fullmatch(line.rstrip())
        if heading and (text := heading.group(1).rstrip("#").strip()):
            flush()
            blocks.append(Block(text, is_heading=True))
        else:
            pending.append(line)
    flush()
    title = next((b.text for b in blocks if b.is_heading), fallback_title)
    return single_page(title, blocks)


def parse_csv(text: str, fallback_title: str) -> ParsedDocument:
    """The rows as one table (``tables.table_blocks``) captioned with the file's name: the
    first row is its header unless it reads as data (a number, an empty cell)."""
    rows = _csv_rows(text)
    if not rows:
        raise ParseError("the CSV file has no rows")
    header_rows = 1 if looks_like_header(rows[0], rows[1:]) else 0
    return single_page(
        fallback_title, table_blocks(rows, caption=fallback_title, header_rows=header_rows)
    )


def _csv_rows(text: str) -> list[list[str]]:
    """The non-blank rows, their cells stripped, in the dialect sniffed from the start."""
    try:
        dialect: type[csv.Dialect] | str = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = "excel"
    csv.field_size_limit(_MAX_CSV_FIELD)
    try:
        rows = [[cell.strip() for cell in row] for row in csv.reader(io.StringIO(text), dialect)]
    except csv.Error as exc:
        raise ParseError(f"malformed CSV: {exc}") from exc
    return [row for row in rows if any(row)]
