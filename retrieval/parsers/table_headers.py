"""Which rows of a table are its header, found once for every format.

:func:`split_header` reads the cells' text and what the format knows of them
(:class:`Hint`: merged across, merged down, typed as a number or as text): title rows
above the table join its caption, header rows are kept whole (two rows under a merged
"2025"), and merged cells are spread (:func:`spread_merges`) so a flattened header names
every column a merged label spans. :func:`grid_blocks` does all of it for one table.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntFlag
from typing import NamedTuple

from retrieval.parsers.tables import is_number, table_blocks
from retrieval.types import Block

MAX_TITLE_ROWS = 3
MAX_HEADER_ROWS = 4


class Hint(IntFlag):
    """What a format knows of a cell besides its text (``split_header``, ``spread_merges``).

    A merged cell's text stands in its first cell; the cells it covers are empty and say
    from which side they are covered.
    """

    NONE = 0
    ACROSS = 1  # covered by the merged cell on its left ("2025" over Q1 to Q4)
    BELOW = 2  # covered by the merged cell above ("Region" over both header rows)
    NUMBER = 4  # typed as a number, date or truth value: data, never a label
    TEXT = 8  # typed as text: a label even where it reads as a number ("2025")


Hints = Sequence[Sequence[Hint]]


def _holding(flag: Hint) -> frozenset[int]:
    """Every hint holding ``flag``: a set lookup costs a tenth of IntFlag's ``&``, which
    matters once per cell of a million-cell sheet."""
    return frozenset(value for value in range(16) if value & flag)


_ACROSS, _BELOW = _holding(Hint.ACROSS), _holding(Hint.BELOW)
_NUMBER, _TEXT = _holding(Hint.NUMBER), _holding(Hint.TEXT)


class HeaderSplit(NamedTuple):
    titles: int  # leading title rows: the table's caption rather than its rows
    header: int  # the header rows under them


def split_header(
    rows: Sequence[Sequence[str]], hints: Hints = (), *, marked: int = 0
) -> HeaderSplit:
    """Where a table's title rows and header rows end, from its cells' text and hints
    (``hints`` may be short or absent: a cell without one is read by its text).

    Title rows: up to ``MAX_TITLE_ROWS`` leading rows of one value in the table's first
    column over wider rows (a sheet's title above its table). Header: at least the
    ``marked`` rows the format marks (Word's "repeat as header row"); leading rows with
    cells merged across and the row under them unless it holds numbers; else, without
    merges, a first row with gaps that the row under it labels, over rows of numbers or
    under a label merged down (Excel's CSV export of merged cells); else a first row of
    labels (no number, at most one column unlabelled; a one-column table's only over
    numbers). Rows covered by a header cell merged down are header too. At least one
    row is left for the body.
    """
    view = CellView(rows, hints)
    titles = _title_rows(view)
    return HeaderSplit(titles, _header_rows(view, titles, max(marked - titles, 0)))


class CellView:
    """Cells and hints by position; rows may be ragged and hints short or absent."""

    def __init__(self, rows: Sequence[Sequence[str]], hints: Hints):
        self.rows = rows
        self.hints = hints
        self.width = max((len(row) for row in rows), default=0)

    def text(self, r: int, c: int) -> str:
        row = self.rows[r]
        return row[c] if c < len(row) else ""

    def hint(self, r: int, c: int) -> Hint:
        row = self.hints[r] if r < len(self.hints) else ()
        return row[c] if c < len(row) else Hint.NONE

    def filled(self, r: int) -> list[int]:
        return [c for c, text in enumerate(self.rows[r]) if text]

    def number(self, r: int, c: int) -> bool:
        hint = self.hint(r, c)
        if hint in _NUMBER or hint in _TEXT:
            return hint in _NUMBER
        return is_number(self.text(r, c))

    def labels(self, r: int) -> bool:
        """Whether the row holds text and none of it is a number."""
        filled = self.filled(r)
        return bool(filled) and not any(self.number(r, c) for c in filled)

    def has(self, r: int, hints: frozenset[int]) -> bool:
        return r < len(self.hints) and any(hint in hints for hint in self.hints[r])


def _title_rows(view: CellView) -> int:
    count = 0
    while count < min(MAX_TITLE_ROWS, len(view.rows) - 1):
        filled = view.filled(count)
        if len(filled) != 1 or any(any(row[: filled[0]]) for row in view.rows):
            break  # not one value, or one right of the table's left edge
        if not any(len(view.filled(r)) > 1 for r in range(count + 1, len(view.rows))):
            break  # a list of one-value rows is a table of one column
        count += 1
    return count


def _header_rows(view: CellView, start: int, marked: int) -> int:
    limit = min(MAX_HEADER_ROWS, len(view.rows) - start - 1)
    if limit <= 0:
        return 0
    count = min(marked, limit)
    across = 0
    while across < limit and view.has(start + across, _ACROSS):
        across += 1
    if across:
        count = max(count, across + int(across < limit and view.labels(start + across)))
    elif not count and limit >= 2 and _gapped(view, start):
        count = 2
    elif not count:
        count = int(_labels_first(view, start))
    while 0 < count < limit and view.has(start + count, _BELOW):
        count += 1
    return count


def _labels_first(view: CellView, r: int) -> bool:
    if not view.labels(r):
        return False
    if view.width == 1:  # a list of names has no header; "Amount" over numbers has
        return any(view.number(below, 0) for below in range(r + 1, len(view.rows)))
    return len(view.filled(r)) >= view.width - 1


def _gapped(view: CellView, top: int) -> bool:
    """Whether the first row's gaps are merged cells: the row under it labels each gap
    and every column, and under those labels come numbers or beside them a label
    merged down (an empty cell under a filled one)."""
    under, body, columns = top + 1, top + 2, range(view.width)
    filled = view.filled(top)
    gaps = [c for c in columns if filled and c > filled[0] and not view.text(top, c)]
    if not gaps or not all(view.text(under, c) for c in gaps):
        return False
    if not all(view.text(top, c) or view.text(under, c) for c in columns):
        return False
    if not view.labels(under) or len(view.filled(under)) < 2:
        return False
    return any(view.text(top, c) and not view.text(under, c) for c in columns) or any(
        view.text(under, c) and view.text(body, c) and view.number(body, c) for c in columns
    )


def spread_merges(rows: Sequence[Sequence[str]], hints: Hints, header_rows: int) -> list[list[str]]:
    """The rows, padded to one width, with merged cells' text in the cells they cover:
    across and down in the header (a merged "2025" names each quarter under it), only
    down a merge's first column in the body (each row says its group; a label merged
    over two body cells is written once). In the header rows above the last, a gap
    right of a text takes that text where the last header row labels the column: what
    a CSV export leaves of a merged cell."""
    width = max((len(row) for row in rows), default=0)
    out = [[*row, *[""] * (width - len(row))] for row in rows]
    for r, (row, row_hints) in enumerate(zip(out, hints, strict=False)):
        in_header = r < header_rows
        for c, hint in enumerate(row_hints[:width]):
            if row[c] or not hint:
                continue
            if hint in _BELOW and r and (in_header or hint not in _ACROSS):
                row[c] = out[r - 1][c]
            elif hint in _ACROSS and c and in_header:
                row[c] = row[c - 1]
    labels = out[header_rows - 1] if header_rows > 1 else []
    for row in out[: max(header_rows - 1, 0)]:
        for c in range(1, len(row)):
            if not row[c] and row[c - 1] and labels[c]:
                row[c] = row[c - 1]
    return out


def grid_blocks(
    rows: Sequence[Sequence[str]], hints: Hints = (), *, caption: str = "", marked: int = 0
) -> list[Block]:
    """A table's blocks, its header found by :func:`split_header` (its title rows join
    the caption) and its merged cells spread (:func:`spread_merges`)."""
    kept = [r for r, row in enumerate(rows) if any(row)]
    rows = [rows[r] for r in kept]
    hints = [hints[r] if r < len(hints) else () for r in kept]
    split = split_header(rows, hints, marked=marked)
    titles = [next(text for text in row if text) for row in rows[: split.titles]]
    cells = spread_merges(rows[split.titles :], hints[split.titles :], split.header)
    caption = " — ".join(part for part in (caption, *titles) if part)
    return table_blocks(cells, caption=caption, header_rows=split.header)
