"""One table model for every format: rows under a header, written as Markdown.

A parser that finds a table (a DOCX or ODT table, an HTML ``<table>``, a sheet, a slide's
table, a CSV file, a table found on a PDF page) hands its cells to :func:`table_blocks`.
Each body row becomes a :class:`Block` whose text is the row as Markdown
(``| Silver | 500 | 30 |``) and whose ``table`` is the table's context: its caption (or the
nearest heading) and its header row, also Markdown. The header row comes first, as a
block marked ``is_heading`` with the same context: it is part of the page (the viewer
shows the table whole) but no passage of its own, since every passage cut from the table
carries it in its context. The chunker never mixes a table's rows with other text, so a
row read alone still says what its values are, and the model sees the rows as a Markdown
table.

Headers are flattened: a header of several rows (a merged "2025" over "Q1 | Q2") becomes
one row whose cells join their parts ("2025 Q1 | 2025 Q2"). Cells keep their text as
written (numbers are never reformatted); empty cells stay empty columns, so values never
shift into a neighbour's column. Which rows are the header is found in
``table_headers.py``; how a sheet is cut into tables, in ``sheets.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from retrieval.types import Block

MAX_CELL_CHARS = 2_000  # a cell longer than this is cut (a paragraph pasted into a cell)
MAX_COLUMNS = 256  # beyond this, columns are cut (a sheet with 16,384 used columns)
_PIPE = "\\|"
_DIGIT = re.compile(r"\d")


def cell_text(value: object) -> str:
    """A cell's text on one line, Markdown's pipe escaped, cut at ``MAX_CELL_CHARS``."""
    text = " ".join(str(value).split()) if value is not None else ""
    if len(text) > MAX_CELL_CHARS:
        text = text[: MAX_CELL_CHARS - 1].rstrip() + "…"
    return text.replace("|", _PIPE)


def markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def flatten_header(header_rows: Sequence[Sequence[str]]) -> list[str]:
    """Several header rows as one: each column's distinct parts, top to bottom, joined.

    A merged cell spread over its columns (the format's reader repeats its text in each)
    thus names every column it spans ("2025 Q1", "2025 Q2").
    """
    width = max((len(row) for row in header_rows), default=0)
    flat = []
    for column in range(width):
        parts: list[str] = []
        for row in header_rows:
            part = row[column] if column < len(row) else ""
            if part and (not parts or parts[-1] != part):
                parts.append(part)
        flat.append(" ".join(parts))
    return flat


def table_context(caption: str, header: Sequence[str]) -> str:
    """The caption (or heading) line, then the header row and Markdown's rule under it."""
    lines = [caption] if caption else []
    if any(header):
        lines += [markdown_row(header), markdown_row(["---"] * len(header))]
    return "\n".join(lines)


def table_blocks(
    rows: Sequence[Sequence[object]],
    *,
    caption: str = "",
    header_rows: int = 1,
) -> list[Block]:
    """The blocks of a table: its header row (``is_heading``, when it has one), then one
    per non-empty body row, each carrying the table context.

    ``rows`` are cells in reading order (``None`` for an empty cell). The first
    ``header_rows`` rows are the header (0: a table without one, such as a layout table;
    its rows still travel together under the caption). Rows are padded to one width, so
    a short row's missing cells stay empty columns. A table of one row and no body is
    kept as one row, so its text is not lost.
    """
    cells = [[cell_text(value) for value in row[:MAX_COLUMNS]] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return []
    width = max(len(row) for row in cells)
    cells = [row + [""] * (width - len(row)) for row in cells]
    header_rows = min(header_rows, len(cells) - 1) if len(cells) > 1 else 0
    header = flatten_header(cells[:header_rows]) if header_rows else []
    body = _without_empty_columns(cells[header_rows:], header)
    header = body.header
    context = table_context(" ".join(caption.split()), header) or None
    head = [Block(markdown_row(header), is_heading=True, table=context)] if any(header) else []
    return head + [Block(markdown_row(row), table=context) for row in body.rows]


class _Trimmed:
    def __init__(self, header: list[str], rows: list[list[str]]):
        self.header = header
        self.rows = rows


def _without_empty_columns(rows: list[list[str]], header: list[str]) -> _Trimmed:
    """Drop the columns that are empty in the header and in every row (trailing columns a
    spreadsheet reports as used, spacer columns of a layout table)."""
    width = len(rows[0]) if rows else len(header)
    keep = [
        column
        for column in range(width)
        if (header and header[column]) or any(row[column] for row in rows)
    ]
    if len(keep) == width:
        return _Trimmed(list(header), rows)
    return _Trimmed(
        [header[column] for column in keep] if header else [],
        [[row[column] for column in keep] for row in rows],
    )


def looks_like_header(first: Sequence[str], rest: Sequence[Sequence[str]]) -> bool:
    """Whether a table's first row reads as a header: there are rows below it, and its
    cells are all filled and none is a number. Formats that mark header rows (``<th>``,
    Word's "repeat as header row") do not need this guess."""
    if not rest or not first or not all(first):
        return False
    return not any(is_number(cell) for cell in first)


def is_number(text: str) -> bool:
    if not _DIGIT.search(text):
        return False
    cleaned = text.replace(",", "").replace(" ", "").strip("%$€£¥+-()")
    try:
        float(cleaned)
    except ValueError:
        return False
    return True
