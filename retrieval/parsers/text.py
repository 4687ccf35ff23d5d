"""Plain text, Markdown and CSV: decoded text split into headings and paragraphs."""

from __future__ import annotations

import csv
import io
import re

from retrieval.parsers.errors import ParseError
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
    """One block per row, written as ``column: value`` pairs so each row reads on its own."""
    try:
        dialect: type[csv.Dialect] | str = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = "excel"
    csv.field_size_limit(_MAX_CSV_FIELD)
    try:
        rows = [
            row for row in csv.reader(io.StringIO(text), dialect) if any(c.strip() for c in row)
        ]
    except csv.Error as exc:
        raise ParseError(f"malformed CSV: {exc}") from exc
    if not rows:
        raise ParseError("the CSV file has no rows")
    header, body = rows[0], rows[1:]
    if not body:
        return single_page(fallback_title, [Block(", ".join(header))])
    blocks = [Block(_row_text(header, row)) for row in body]
    return single_page(fallback_title, blocks)


def _row_text(header: list[str], row: list[str]) -> str:
    pairs = []
    for index, value in enumerate(row):
        name = header[index].strip() if index < len(header) else f"column {index + 1}"
        if value.strip():
            pairs.append(f"{name}: {' '.join(value.split())}")
    return "; ".join(pairs)
