"""Tables on PDF pages, found by their ruling lines (pdfplumber), as rows under a header.

A PDF has no tables, only characters and lines at positions. pdfplumber (MIT, on
pdfminer.six, MIT) finds a table drawn with rules (a grid, cell borders) from those lines:
``find_tables`` with its "lines" strategy. Measured before choosing, on generated pages
(ruled and unruled tables, nine kinds of prose) and pdfplumber's own 243 test pages:
"lines" read every generated ruled table with every row exact and made no prose page a
table; the "text" strategy (columns guessed from aligned words) made a table of every
prose page and got no row of an unruled table right. So tables without rules stay text.
PyMuPDF, faster, is AGPL and excluded.

pdfplumber is pure Python, several times slower than pypdf per page, so it only reads the
pages that can hold a ruled table: PDFium (already used to render pages) first looks at
each page's straight path segments, cheaply, and a page without horizontal rules at three
heights and vertical ones at three places (a grid of two rows and two columns) is left to
pypdf. A page with a table is read entirely by pdfplumber: the text outside the tables, in
bands from top to bottom, and each table's rows (``tables.py``) in its place; text inside
a table is not repeated in the paragraphs.

Limits: best effort, and bounded (``TABLES_BUDGET_S`` per document; a page of more than
``MAX_PAGE_OBJECTS`` objects is a drawing and skipped). A page not reached, one that fails
in pdfplumber and one whose words pdfplumber reads differently from pypdf (``_agrees``)
keep pypdf's text. A table needs two rows and two columns with text (a box around a note
is none). The header is the first row when it reads as one, a merged cell naming each
column it spans (two rows when a merged first row has names under it); in the body a
merged cell is written once. The caption is a "Table 3 ..." line just above or below the
table, else a bold line just above it, else a first row that is one cell across the whole
table; a table going on at the top of the next page under the same header keeps it.
Pages are read as drawn, without their /Rotate.
"""

from __future__ import annotations

import ctypes
import io
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from retrieval.parsers.tables import looks_like_header, table_blocks
from retrieval.parsers.text import clean_text, paragraphs
from retrieval.types import Block

TABLES_BUDGET_S = 30.0  # of the parser child's 120 s; pages not reached keep pypdf's text
MAX_PAGE_OBJECTS = 20_000  # a page with more is a drawing (a map, a plan), not a table
MAX_SEGMENTS = 5_000  # looked at per path: a path of a million segments is not a grid
MIN_RULES = 3  # two rows or columns need three rules
MIN_RULE_LENGTH = 3.0  # points: shorter strokes are underline ends and ticks
_CAPTION = re.compile(r"(table|tab\.)\s*[0-9ivx]+\b", re.IGNORECASE)
# Words to compare two readings of a page by; CJK characters one by one, as those scripts
# are not written with spaces.
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uff00-\uffef]|[^\W_]+")
MIN_AGREEMENT = 0.75
_BOLD = re.compile(r"bold|black|heavy|semibold|demi", re.IGNORECASE)

Bbox = tuple[float, float, float, float]


def page_tables(data: bytes, texts: Mapping[int, str]) -> dict[int, tuple[Block, ...]]:
    """The blocks of those pages that hold ruled tables, among the pages ``texts`` gives
    pypdf's text of (by 1-based number): text and tables in page order. Pages without a
    table, those past the budget, those pdfplumber cannot read and those it reads
    differently from pypdf are missing: they keep pypdf's text."""
    deadline = time.monotonic() + TABLES_BUDGET_S
    ruled = ruled_pages(data, sorted(texts), deadline)
    return _carry_captions(_read_pages(data, {n: texts[n] for n in ruled}, deadline))


def ruled_pages(data: bytes, numbers: Sequence[int], deadline: float | None = None) -> list[int]:
    """Those of the pages ``numbers`` that have enough straight rules to hold a ruled
    table (looked at until ``deadline``, a ``time.monotonic`` value); none when PDFium
    cannot read the file."""
    import pypdfium2 as pdfium

    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError:
        return []
    ruled = []
    try:
        for number in numbers:
            if deadline is not None and time.monotonic() >= deadline:
                break
            if _is_ruled(document[number - 1]):
                ruled.append(number)
    finally:
        document.close()
    return ruled


def _is_ruled(page: Any) -> bool:
    """Whether the page draws straight rules at three heights or more and at three
    places across or more, each at least ``MIN_RULE_LENGTH`` long (as pdfplumber's own
    edges): a grid of two rows and two columns at least. A frame, underlines and the
    thin boxes some producers draw rules with do not count."""
    import pypdfium2.raw as pdfium_c

    if pdfium_c.FPDFPage_CountObjects(page.raw) > MAX_PAGE_OBJECTS:
        return False
    heights: set[int] = set()
    places: set[int] = set()
    paths = page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_PATH], max_depth=3)
    for count, path in enumerate(paths):
        if count >= MAX_PAGE_OBJECTS:
            return False  # paths nested in forms: a drawing too
        for a, b in _lines(path.raw):
            dx, dy = abs(b[0] - a[0]), abs(b[1] - a[1])
            if dx >= MIN_RULE_LENGTH and dy <= dx / 100:
                heights.add(round(a[1]))
            elif dy >= MIN_RULE_LENGTH and dx <= dy / 100:
                places.add(round(a[0]))
        if len(heights) >= MIN_RULES and len(places) >= MIN_RULES:
            return True
    return False


Point = tuple[float, float]


def _lines(path: Any) -> Iterator[tuple[Point, Point]]:
    """A path's straight segments, closing ones included, in page coordinates (its
    matrix applied; a path inside a form keeps the form's own coordinates)."""
    import pypdfium2.raw as pdfium_c

    matrix = pdfium_c.FS_MATRIX()
    if not pdfium_c.FPDFPageObj_GetMatrix(path, matrix):
        return

    def place(x: float, y: float) -> Point:
        return (
            matrix.a * x + matrix.c * y + matrix.e,
            matrix.b * x + matrix.d * y + matrix.f,
        )

    x, y = ctypes.c_float(), ctypes.c_float()
    start = last = (0.0, 0.0)
    for index in range(min(pdfium_c.FPDFPath_CountSegments(path), MAX_SEGMENTS)):
        segment = pdfium_c.FPDFPath_GetPathSegment(path, index)
        if not pdfium_c.FPDFPathSegment_GetPoint(segment, ctypes.byref(x), ctypes.byref(y)):
            continue
        point = place(x.value, y.value)
        kind = pdfium_c.FPDFPathSegment_GetType(segment)
        if kind == pdfium_c.FPDF_SEGMENT_MOVETO:
            start = point
        elif kind == pdfium_c.FPDF_SEGMENT_LINETO:
            yield last, point
            if pdfium_c.FPDFPathSegment_GetClose(segment):
                yield point, start
        last = point


def _read_pages(
    data: bytes, texts: Mapping[int, str], deadline: float
) -> dict[int, tuple[Block, ...]]:
    if not texts:
        return {}
    import pdfplumber

    found: dict[int, tuple[Block, ...]] = {}
    try:
        pdf = pdfplumber.open(io.BytesIO(data))
    except Exception:  # best effort: pypdf read this file, its text stands
        return found
    with pdf:
        for number, text in texts.items():
            if time.monotonic() >= deadline:
                break
            blocks = _read_page(pdf, number)
            if blocks and _agrees(blocks, text):
                found[number] = blocks
    return found


def _carry_captions(found: dict[int, tuple[Block, ...]]) -> dict[int, tuple[Block, ...]]:
    """A table going on from one page to the next repeats its header there, not its
    caption: rows under the same header at the top of the next page get the caption."""
    for number, blocks in found.items():
        before = [b.table for b in found.get(number - 1, ()) if b.table]
        first = next((b.table for b in blocks if b.table), None)
        if not before or not first or first == before[-1] or not first.startswith("| "):
            continue
        if before[-1].endswith("\n" + first):
            carried = before[-1]
            found[number] = tuple(
                replace(b, table=carried) if b.table == first else b for b in blocks
            )
    return found


def _agrees(blocks: Sequence[Block], text: str) -> bool:
    """Whether pdfplumber's reading of a page holds nearly all the words pypdf read there.
    pdfminer sometimes reads a page's characters in reverse or runs its words together
    where pypdf does not (4% and 32% of the words, where pages read well hold 88% or
    more): then pypdf's text is the better one."""
    expected = _words(text)
    if not expected:
        return True
    found = set(_words(" ".join(f"{b.text} {b.table or ''}" for b in blocks)))
    return sum(word in found for word in expected) >= MIN_AGREEMENT * len(expected)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _read_page(pdf: Any, number: int) -> tuple[Block, ...] | None:
    try:
        page = pdf.pages[number - 1]
    except Exception:  # a page tree pdfminer reads differently from pypdf
        return None
    try:
        tables = list(_tables(page))
        return _page_blocks(page, tables) if tables else None
    except Exception:  # pdfminer failed on this page: pypdf's text stands
        return None
    finally:
        page.close()  # pdfplumber caches every object of a page until closed


class _Table:
    def __init__(self, bbox: Bbox, rows: list[list[str | None]]):
        self.bbox = bbox
        self.rows = rows


def _tables(page: Any) -> Iterator[_Table]:
    """The page's ruled tables of at least two rows and two columns with text: a box
    around a paragraph or a striped list of one column is no table."""
    for found in page.find_tables():
        rows = found.extract()
        filled_rows = sum(1 for row in rows if any(row))
        width = max((len(row) for row in rows), default=0)
        filled_columns = sum(
            1 for column in range(width) if any(column < len(row) and row[column] for row in rows)
        )
        if filled_rows >= 2 and filled_columns >= 2:
            yield _Table(tuple(found.bbox), rows)


def _page_blocks(page: Any, tables: list[_Table]) -> tuple[Block, ...]:
    """The text above each table, the table, and the text below the last, in bands."""
    from pdfplumber.utils.text import extract_text

    tables.sort(key=lambda table: (table.bbox[1], table.bbox[0]))
    chars = [char for char in page.chars if not _inside_any(char, tables)]
    tops = [table.bbox[1] for table in tables] + [float("inf")]
    bands: list[list[str]] = [[] for _ in tops]
    for band, text in enumerate(_band_texts(chars, tops, extract_text)):
        bands[band] = [line for line in clean_text(text).split("\n") if line.strip()]
    blocks = _paragraphs(bands[0])
    for index, table in enumerate(tables):
        caption = _caption(bands[index], bands[index + 1])
        caption = caption or _bold_line_above(chars, table.bbox[1], extract_text)
        title, rows = _title_row(table.rows)
        rows, header_rows = _with_header(rows)
        blocks += table_blocks(rows, caption=caption or title, header_rows=header_rows)
        blocks += _paragraphs(bands[index + 1])
    return tuple(blocks)


def _band_texts(chars: list[dict[str, Any]], tops: list[float], extract: Any) -> Iterator[str]:
    """The text of the characters above the first table's top, then of each band from one
    table's top to the next one's (beside and below that table)."""
    upper = float("-inf")
    for lower in tops:
        inside = [char for char in chars if upper <= _middle(char) < lower]
        yield extract(inside) if inside else ""
        upper = lower


def _middle(char: dict[str, Any]) -> float:
    return (float(char["top"]) + float(char["bottom"])) / 2


def _inside_any(char: dict[str, Any], tables: list[_Table]) -> bool:
    x = (float(char["x0"]) + float(char["x1"])) / 2
    y = _middle(char)
    return any(
        x0 <= x <= x1 and top <= y <= bottom for x0, top, x1, bottom in (t.bbox for t in tables)
    )


def _paragraphs(lines: list[str]) -> list[Block]:
    # As pypdf's text is read (pdf.py): lines of one paragraph are joined with spaces.
    return [Block(" ".join(block.text.split())) for block in paragraphs("\n".join(lines))]


def _caption(above: list[str], below: list[str]) -> str:
    """A "Table 3: ..." line just above the table, or just below it."""
    for line in above[-1:] + below[:1]:
        if _CAPTION.match(line.strip()):
            return line.strip()
    return ""


def _bold_line_above(chars: list[dict[str, Any]], top: float, extract: Any) -> str:
    """The line just above a table (within two of its heights) when it is all bold: the
    table's caption or heading ("Quarterly net sales by region")."""
    above = [char for char in chars if _middle(char) < top]
    if not above:
        return ""
    lowest = max(above, key=lambda char: float(char["bottom"]))
    bottom, size = float(lowest["bottom"]), float(lowest.get("size") or 10)
    if top - bottom > 2 * size:
        return ""
    line = [char for char in above if abs(float(char["bottom"]) - bottom) <= size / 3]
    if not all(_BOLD.search(str(char.get("fontname", ""))) for char in line):
        return ""
    return " ".join(str(extract(line)).split())


def _title_row(rows: list[list[str | None]]) -> tuple[str, list[list[str | None]]]:
    """A first row that is one cell across the whole table is its title, not its header
    ("NICS Firearm Background Checks November 2015"): the title and the other rows."""
    first = rows[0] if rows else []
    if len(first) > 1 and first[0] and all(cell is None for cell in first[1:]):
        return " ".join(first[0].split()), rows[1:]
    return "", rows


def _with_header(rows: list[list[str | None]]) -> tuple[list[list[str | None]], int]:
    """The rows, with their header rows counted and filled in.

    pdfplumber leaves ``None`` where a merged cell covers a grid cell. A first row with a
    cell merged across columns over a second row that names those columns is a header of
    two rows ("2025" over "Q1 | Q2"); otherwise the first row is the header when it reads
    as one (``looks_like_header``: columns empty in every row, gaps between rules, are not
    asked). In the header a covered cell takes the text of the cell covering it, from the
    left in the first row and from above in the second, so every column is named.
    """
    rows = [row for row in rows if any(row)]
    if len(rows) < 2:
        return rows, 0
    first: list[str | None] = []
    for cell in rows[0]:
        first.append(first[-1] if cell is None and first else cell)
    if len(rows) > 2 and _names_spanned_columns(rows[0], rows[1]):
        pairs = zip(rows[1], first, strict=False)
        second = [above if cell is None else cell for cell, above in pairs]
        return [first, second, *rows[2:]], 2
    width = max(len(row) for row in rows)
    filled = [c for c in range(width) if any(c < len(row) and row[c] for row in rows)]
    texts = [" ".join((first[c] or "").split()) if c < len(first) else "" for c in filled]
    rest = [[cell or "" for cell in row] for row in rows[1:]]
    return ([first, *rows[1:]], 1) if looks_like_header(texts, rest) else (rows, 0)


def _names_spanned_columns(upper: list[str | None], lower: list[str | None]) -> bool:
    """Whether ``lower`` has text under a cell of ``upper`` merged across columns."""
    return any(upper[c] is None and lower[c] for c in range(1, min(len(upper), len(lower))))
