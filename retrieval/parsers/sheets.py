"""Sheets (XLSX, ODS, CSV) laid out as tables, the same way for every format.

Blank rows split a sheet into tables, a lone value titles the table under it, and a block
that goes on with a table's columns (its first row neither repeats the header nor puts
text where the table has numbers) continues it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from retrieval.parsers.table_headers import CellView, HeaderSplit, Hint, split_header, spread_merges
from retrieval.parsers.tables import table_blocks
from retrieval.types import Block


@dataclass
class SheetRow:
    """A row of a sheet (XLSX, ODS, CSV): its number (a gap before it is blank rows), its
    filled cells' text and the cells' hints by column (a covered cell has a hint only),
    and whether the file marks it as a header row."""

    number: int
    cells: dict[int, str]
    hints: dict[int, Hint] = field(default_factory=dict)
    marked: bool = False


def sheet_blocks(name: str, rows: Sequence[SheetRow]) -> list[Block]:
    """A sheet's tables, captioned with ``name`` and the title rows above each.

    Blank rows split the sheet into blocks. A block of one value is a title of the table
    under it (or a paragraph, when none follows). A block after a blank row, without a
    title, with the same columns as the table above, whose first row neither repeats its
    header nor puts a label in a column of numbers, continues that table (groups set
    apart by blank rows). Otherwise a block is a table, its header found by
    :func:`split_header`.
    """
    tables: list[_SheetTable] = []
    pending: list[str] = []  # titles waiting for the table under them
    for block in _blank_row_blocks(rows):
        if len(block) == 1 and len(block[0].cells) == 1:
            pending += block[0].cells.values()
            continue
        table = _SheetTable(block)
        marked = next((r for r, row in enumerate(block) if not row.marked), len(block))
        split = split_header(table.texts, table.hints, marked=marked)
        if not pending and not split.titles and tables and tables[-1].continued_by(table):
            tables[-1].extend(table)
            continue
        table.start(pending, split)
        tables.append(table)
        pending = []
    blocks = [block for table in tables for block in table.blocks(name)]
    return blocks + [Block(title) for title in pending]


def _blank_row_blocks(rows: Sequence[SheetRow]) -> Iterator[Sequence[SheetRow]]:
    start = 0
    for index in range(1, len(rows) + 1):
        if index == len(rows) or rows[index].number > rows[index - 1].number + 1:
            yield rows[start:index]
            start = index


class _SheetTable:
    """A table's rows over its columns (merges included), its titles and header."""

    def __init__(self, rows: Sequence[SheetRow]):
        columns = [column for row in rows for column in (*row.cells, *row.hints)]
        self.first, self.last = min(columns), max(columns)
        width = range(self.first, self.last + 1)
        self.texts = [[row.cells.get(c, "") for c in width] for row in rows]
        self.hints = [
            [row.hints.get(c, Hint.NONE) for c in width] if row.hints else [] for row in rows
        ]
        self.titles: list[str] = []
        self.header = 0
        self._numeric: set[int] | None = None  # columns with numbers in the body

    def start(self, pending: list[str], split: HeaderSplit) -> None:
        self.titles = pending + [next(t for t in row if t) for row in self.texts[: split.titles]]
        del self.texts[: split.titles], self.hints[: split.titles]
        self.header = split.header

    def continued_by(self, other: _SheetTable) -> bool:
        if (other.first, other.last) != (self.first, self.last):
            return False
        if self.header and other.texts[0] == self.texts[self.header - 1]:
            return False
        label = CellView(other.texts, other.hints)
        return not any(
            text and c in self.numeric() and not label.number(0, c)
            for c, text in enumerate(other.texts[0])
        )

    def numeric(self) -> set[int]:
        if self._numeric is None:
            self._numeric = set()
            self._add_numbers(self.texts[self.header :], self.hints[self.header :])
        return self._numeric

    def extend(self, other: _SheetTable) -> None:
        self.texts += other.texts
        self.hints += other.hints
        if self._numeric is not None:
            self._add_numbers(other.texts, other.hints)

    def _add_numbers(self, texts: list[list[str]], hints: list[list[Hint]]) -> None:
        view = CellView(texts, hints)
        assert self._numeric is not None
        for r, row in enumerate(texts):
            self._numeric.update(c for c, text in enumerate(row) if text and view.number(r, c))

    def blocks(self, name: str) -> list[Block]:
        cells = spread_merges(self.texts, self.hints, self.header)
        caption = " — ".join(part for part in (name, *self.titles) if part)
        return table_blocks(cells, caption=caption, header_rows=self.header)
