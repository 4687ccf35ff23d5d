"""Plain text, Markdown and CSV: decoded text split into headings and paragraphs, tables
into rows under their header (``retrieval/parsers/tables.py``).

Markdown's pipe tables (GitHub Flavored Markdown: a header row, the ``| --- |`` rule
under it, alignment colons and outer pipes optional, ``\\|`` an escaped pipe) become
tables captioned with a line in bold or italics right before the table, else the
nearest heading above; their rows go on to the first blank line or line without a
pipe. Fenced code is never split at a ``#`` line and never read as a table. A CSV file
is one sheet (``tables.sheet_blocks``, as XLSX and ODS sheets): blank lines split it,
a title line over a blank line captions the table under it, and the header may span two
rows, as Excel exports a merged header ("2025" in the first column of its span, the
others empty, over "Q1,Q2,Q3,Q4").
"""

from __future__ import annotations

import csv
import io
import re

from retrieval.parsers.errors import ParseError
from retrieval.parsers.sheets import SheetRow, sheet_blocks
from retrieval.parsers.table_headers import grid_blocks
from retrieval.parsers.tables import MAX_COLUMNS
from retrieval.types import Block, ParsedDocument, ParsedPage

_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BLANK_LINES = re.compile(r"\n\s*\n")
_ATX_HEADING = re.compile(r"#{1,6}[ \t]+(\S.*)")  # linear: trailing #s are stripped in code
_FENCE = re.compile(r"^\s*(```|~~~)")
_PIPE = re.compile(r"(?<!\\)\|")  # a cell boundary: a pipe not escaped as \|
_TABLE_RULE = re.compile(r"\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?")  # on a stripped line
_EMPHASIS = re.compile(r"(\*\*|__|\*|_)(\S.*?)\1")
_MAX_CAPTION_CHARS = 300
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
    """ATX headings become heading blocks and pipe tables tables; fenced code is never
    split at a ``#`` line nor read as a table."""
    blocks: list[Block] = []
    pending: list[str] = []
    heading = ""
    in_fence = False
    lines = text.split("\n")

    def flush() -> None:
        blocks.extend(paragraphs("\n".join(pending)))
        pending.clear()

    index = 0
    while index < len(lines):
        line = lines[index]
        if _FENCE.match(line):
            in_fence = not in_fence
        end = index if in_fence else _table_end(lines, index)
        if end > index:
            flush()
            blocks.extend(_pipe_table(lines[index:end], _caption(heading, blocks)))
            index = end
            continue
        match = None if in_fence else _ATX_HEADING.fullmatch(line.rstrip())
        if match and (text := match.group(1).rstrip("#").strip()):
            flush()
            blocks.append(Block(text, is_heading=True))
            heading = text
        else:
            pending.append(line)
        index += 1
    flush()
    title = next((b.text for b in blocks if b.is_heading and b.table is None), fallback_title)
    return single_page(title, blocks)


def _table_end(lines: list[str], start: int) -> int:
    """Where the pipe table starting at ``lines[start]`` ends (``start``: none starts
    there): a header row, the rule under it with as many cells, rows with a pipe."""
    if start + 1 >= len(lines):
        return start
    head, rule = lines[start], lines[start + 1].strip()
    if head.startswith(("    ", "\t")) or not _PIPE.search(head) or "|" not in rule:
        return start  # indented: code; or no pipe: no table
    if not _TABLE_RULE.fullmatch(rule) or len(_pipe_cells(head)) != len(_pipe_cells(rule)):
        return start
    end = start + 2
    while end < len(lines) and lines[end].strip() and _PIPE.search(lines[end]):
        if _FENCE.match(lines[end]):
            break
        end += 1
    return end


def _pipe_cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [cell.strip().replace("\\|", "|") for cell in _PIPE.split(line)]


def _pipe_table(lines: list[str], caption: str) -> list[Block]:
    """The table's rows cut or padded to its header's width (as GFM reads them)."""
    header, _, *body = (_pipe_cells(line) for line in lines)
    width = len(header)
    rows = [header] + [(row + [""] * width)[:width] for row in body]
    return grid_blocks(rows, caption=caption, marked=int(any(header)))


def _caption(heading: str, blocks: list[Block]) -> str:
    """The paragraph right before the table when it is one line in bold or italics
    (``**Table 2: Prices**``), else the nearest heading (as DOCX and HTML captions)."""
    last = blocks[-1] if blocks else None
    if last is None or last.is_heading or last.table is not None:
        return heading
    line = last.text if len(last.text) <= _MAX_CAPTION_CHARS else ""
    match = _EMPHASIS.fullmatch(line)
    return match.group(2).strip() if match and "\n" not in line else heading


def parse_csv(text: str, fallback_title: str) -> ParsedDocument:
    """The rows as one sheet (``tables.sheet_blocks``) named after the file: its tables,
    their header found as a sheet's is."""
    rows = _csv_rows(text)
    if not rows:
        raise ParseError("the CSV file has no rows")
    return single_page(fallback_title, sheet_blocks(fallback_title, rows))


def _csv_rows(text: str) -> list[SheetRow]:
    """The non-blank rows, numbered as in the file (blank rows stay gaps), their cells
    stripped, in the dialect sniffed from the start."""
    try:
        dialect: type[csv.Dialect] | str = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = "excel"
    csv.field_size_limit(_MAX_CSV_FIELD)
    rows: list[SheetRow] = []
    try:
        for number, record in enumerate(csv.reader(io.StringIO(text), dialect), start=1):
            cells = {
                c: text for c, cell in enumerate(record[:MAX_COLUMNS]) if (text := cell.strip())
            }
            if cells:
                rows.append(SheetRow(number, cells))
    except csv.Error as exc:
        raise ParseError(f"malformed CSV: {exc}") from exc
    return rows
