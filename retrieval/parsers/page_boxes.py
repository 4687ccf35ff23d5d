"""Where passages stand on their PDF pages, and the pages as they look.

A passage is a slice of its page's extracted text; to show it on the page itself, its
lines are searched in the page's text layer (pdfium), in order, and each match gives the
rectangles its characters cover. Boxes are fractions of the page's width and height from
its top-left corner, so they fit the page drawn at any size. Lines that the text layer
spells differently (hyphenation, ligatures) are simply not boxed: the text view beside the
page still highlights the whole passage.

Both run in the parser child (``retrieval/parsers/child.py``): a hostile PDF costs that
process its time budget, never the server.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence

from retrieval.types import Box

MIN_FRAGMENT_CHARS = 12  # shorter pieces match too many places on a page
MAX_FRAGMENT_CHARS = 160
MAX_BOXES = 64  # per passage
MAX_RENDER_PIXELS = 2400  # the longer side of a rendered page
_PIECES = re.compile(r"(?<=[.!?;:])\s+|\n+")
_TABLE_ROW = re.compile(r"\|.*\|")  # a table's row as parsers write it (parsers/tables.py)
_CELL_EDGE = re.compile(r"(?<!\\)\|")


def passage_boxes(data: bytes, passages: Sequence[tuple[int, str]]) -> list[list[Box]]:
    """For each (page number, passage text), the boxes it covers on that page."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(data)
    opened: dict[int, tuple[object, float, float]] = {}
    try:
        found: list[list[Box]] = []
        for number, text in passages:
            if not 1 <= number <= len(document):
                found.append([])
                continue
            if number not in opened:
                page = document[number - 1]
                width, height = page.get_size()
                opened[number] = (page.get_textpage(), width, height)
            textpage, width, height = opened[number]
            found.append(_boxes(textpage, width, height, text))
        return found
    finally:
        document.close()


def _boxes(textpage: object, width: float, height: float, text: str) -> list[Box]:
    boxes: list[Box] = []
    after = 0  # the passage's lines come in order: each is looked for after the last
    for fragment in _fragments(text):
        match = _first_match(textpage, fragment, after)
        if match is None:
            continue
        start, count = match
        after = start + count
        for i in range(textpage.count_rects(start, count)):  # type: ignore[attr-defined]
            left, bottom, right, top = textpage.get_rect(i)  # type: ignore[attr-defined]
            boxes.append(
                (
                    _fraction(left, width),
                    _fraction(height - top, height),
                    _fraction(right, width),
                    _fraction(height - bottom, height),
                )
            )
            if len(boxes) >= MAX_BOXES:
                return boxes
    return boxes


def _fragments(text: str) -> Iterator[str]:
    for piece in _PIECES.split(text):
        if _TABLE_ROW.fullmatch(piece.strip()):  # a row as the page shows it: cells apart
            piece = " ".join(cell.strip() for cell in _CELL_EDGE.split(piece.strip()[1:-1]))
            piece = piece.replace("\\|", "|")
        piece = " ".join(piece.split())
        if len(piece) < MIN_FRAGMENT_CHARS:
            continue
        if len(piece) > MAX_FRAGMENT_CHARS:
            cut = piece[:MAX_FRAGMENT_CHARS]
            piece = cut[: cut.rfind(" ")] if " " in cut else cut
        yield piece


def _first_match(textpage: object, fragment: str, after: int) -> tuple[int, int] | None:
    """The first match at or after character ``after``, else the first anywhere."""
    searcher = textpage.search(fragment, match_case=False)  # type: ignore[attr-defined]
    first = None
    while (match := searcher.get_next()) is not None:
        if first is None:
            first = match
        if match[0] >= after:
            return (int(match[0]), int(match[1]))
    return None if first is None else (int(first[0]), int(first[1]))


def _fraction(value: float, whole: float) -> float:
    return round(min(1.0, max(0.0, value / whole)), 5) if whole > 0 else 0.0


def render_page(data: bytes, number: int, width_px: int) -> bytes:
    """Page ``number`` as a PNG ``width_px`` wide (the longer side at most
    MAX_RENDER_PIXELS). Raises IndexError for a page the document does not have."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(data)
    try:
        if not 1 <= number <= len(document):
            raise IndexError(f"the document has no page {number}")
        page = document[number - 1]
        width, height = page.get_size()
        scale = min(width_px / max(width, 1.0), MAX_RENDER_PIXELS / max(width, height, 1.0))
        image = page.render(scale=scale).to_pil()
        out = io.BytesIO()
        image.save(out, format="PNG", optimize=True)
        return out.getvalue()
    finally:
        document.close()
