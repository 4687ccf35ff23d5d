"""Excel workbooks (XLSX, XLSM, XLTX, XLTM): every sheet a page, its cells tables.

Read with openpyxl (MIT), the reference Python reader of the Office Open XML workbook;
nothing else under a permissive licence reads sheet names and states, shared strings,
number formats, the 1900 and 1904 date systems and merged ranges. The workbook is opened
in read-only mode, which parses only its small parts up front. Each sheet's XML is then
streamed once through openpyxl's own worksheet parser (``WorkSheetParser``, what
``iter_rows`` runs inside): it yields only the rows and cells the file holds, where
``iter_rows`` makes up every absent row in between, and it collects the merged ranges,
which read-only worksheets do not expose. Loading in full mode for the merges
(``read_only=False``) builds an object per cell and took twice as long (5.6 s against
2.8 s for 500,000 cells). openpyxl streams sheets through defusedxml (a project
dependency) and parses the small parts with lxml without entities (or defusedxml);
:func:`check_archive` has refused bombs and DTDs before openpyxl opens anything.

Safety: ``data_only`` gives each formula's value as last saved by the spreadsheet
program; formulas are never evaluated (one never saved with a value is an empty cell).
External links are not loaded (``keep_links=False``) and nothing is fetched. An XLSM's
macros (``xl/vbaProject.bin``) are never loaded, let alone run: the workbook is data.
Encrypted workbooks are OLE files, not ZIP archives, and never come here.

Layout: each worksheet with values is a page labelled ``Sheet “Name”`` (``(hidden)`` for
hidden and very hidden sheets, which are read too); empty sheets and chart sheets are
skipped, and pages are numbered 1, 2, 3 over the sheets kept. Blank rows split a sheet
into blocks. A block is a table (``tables.table_blocks``) captioned with the sheet's name
and the title rows above it: rows of one value at the block's left edge over wider rows
(a merged title), or a block of one value before the table. A block after a blank row
with the same columns as the table above, whose first row neither repeats its header nor
puts text in a column of numbers, continues that table (groups set apart by blank
rows). The header is the leading rows holding horizontally merged cells plus the row
under them, else a first row that is all text (one column may be unlabelled); a numeric
first row is data. A merged value fills every column it spans in the header (a merged
"2025" names "2025 Q1" and "2025 Q2") and runs down its first column in the body (each
row says its group). Values read as the cell shows them where that is cheap: dates as
ISO dates, integers without ".0", floats to 15 significant digits (no binary noise),
fixed decimals, thousands separators, percentages and currency text from the number
format, TRUE/FALSE, error values as written (``#DIV/0!``).

Limits, each told in the document's warnings: a million filled cells over the workbook
(the rest is left out); values right of column ``tables.MAX_COLUMNS`` (IV); a sheet ends
after 1,000 rows in a row that the file holds without values (formatting down to row
1,048,576). Rows the file does not hold cost nothing, so a sheet claiming every one of
its 17 billion cells, or a lone value at XFD1048576, reads in milliseconds. Merged ranges
are stored after the cells, so a sheet cut short by a limit keeps its merges unspread. A
damaged sheet is left out with a warning; a broken workbook part, or a workbook none of
whose sheets could be read or holding no values, fails with the reason.
"""

from __future__ import annotations

import datetime
import io
import re
import warnings
import zipfile
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from openpyxl import load_workbook
from openpyxl.cell.read_only import ReadOnlyCell
from openpyxl.utils.cell import get_column_letter, range_boundaries
from openpyxl.worksheet._read_only import ReadOnlyWorksheet
from openpyxl.worksheet._reader import WorkSheetParser

from retrieval.parsers.errors import ParseError
from retrieval.parsers.office_archive import check_archive
from retrieval.parsers.tables import MAX_COLUMNS, table_blocks
from retrieval.parsers.titles import named_title
from retrieval.types import Block, ParsedDocument, ParsedPage

MAX_CELLS = 1_000_000  # filled cells over the whole workbook
MAX_EMPTY_RUN = 1_000  # rows in a row that the file holds without values: the sheet ends
MAX_TITLE_ROWS = 3
WORKBOOK_PART = "xl/workbook.xml"
# What a damaged part makes openpyxl raise: bad XML (ElementTree's and lxml's errors are
# SyntaxErrors), missing parts, values out of range.
_DAMAGE = (
    SyntaxError,
    KeyError,
    ValueError,
    TypeError,
    IndexError,
    AttributeError,
    OSError,
    zipfile.BadZipFile,
)

Cell = tuple[str, bool]  # the cell's text, and whether the spreadsheet typed it as text


def is_xlsx_zip(archive_names: Collection[str]) -> bool:
    """Whether a ZIP archive's part names are a workbook's (XLSX, XLSM, XLTX, XLTM).

    Every producer writes the workbook part as ``xl/workbook.xml``; an XLSB's is
    ``xl/workbook.bin`` and is not read here.
    """
    return WORKBOOK_PART in archive_names


def parse_xlsx(data: bytes, fallback_title: str) -> ParsedDocument:
    """A page per worksheet with values; see the module docstring for layout and limits.
    The title is the workbook's own (unless a placeholder), else ``fallback_title``."""
    check_archive(data, "XLSX", WORKBOOK_PART)  # before openpyxl parses any XML
    with warnings.catch_warnings():
        # openpyxl warns about what it drops (data validation, odd dates); nothing to show.
        warnings.simplefilter("ignore")
        workbook = _open_workbook(data)
        try:
            return _read_workbook(workbook, fallback_title)
        finally:
            workbook.close()


def _open_workbook(data: bytes) -> Any:
    try:
        return load_workbook(
            io.BytesIO(data), read_only=True, data_only=True, keep_links=False, keep_vba=False
        )
    except _DAMAGE as exc:
        raise ParseError(f"the XLSX workbook cannot be opened: {_damage(exc)}") from exc


def _damage(exc: Exception) -> str:
    if isinstance(exc, SyntaxError):
        return "its XML is malformed"
    if isinstance(exc, KeyError):
        return "a part it refers to is missing"
    return f"its content is invalid ({type(exc).__name__})"


@dataclass
class _Budget:
    """The cells (and merge spreading steps) the workbook may still cost."""

    cells: int
    spreads: int
    exhausted_at: str = ""


def _read_workbook(workbook: Any, fallback_title: str) -> ParsedDocument:
    budget = _Budget(cells=MAX_CELLS, spreads=MAX_CELLS)
    pages: list[ParsedPage] = []
    notes: list[str] = []
    damaged: list[str] = []
    for sheet in workbook.worksheets:  # chart sheets are not worksheets: no cells
        if budget.exhausted_at:
            notes.append(f"Sheet “{sheet.title}” was left out (cell limit reached)")
            continue
        try:
            grid = _read_sheet(sheet, budget)
        except _DAMAGE as exc:
            damaged.append(f"sheet “{sheet.title}” is damaged ({_damage(exc)})")
            continue
        notes += grid.notes
        blocks = _sheet_blocks(sheet.title, grid, budget)
        if blocks:
            pages.append(ParsedPage(len(pages) + 1, tuple(blocks), _label(sheet)))
    if budget.exhausted_at:
        notes.insert(0, budget.exhausted_at)
    if budget.spreads < 0:
        notes.append(f"Merged cells beyond {MAX_CELLS:,} spread cells were not filled in")
    if not pages:
        raise ParseError(_why_empty(damaged, notes))
    title = named_title(workbook.properties.title or "") or fallback_title
    warned = [f"The XLSX {reason}; it was left out" for reason in damaged] + notes
    return ParsedDocument(title=title, pages=tuple(pages), warnings=tuple(warned))


def _why_empty(damaged: list[str], notes: list[str]) -> str:
    if damaged:
        return f"the XLSX workbook could not be read: {damaged[0]}"
    if notes:
        return f"the workbook has no cell values to index ({notes[0]})"
    return "the workbook has no cell values to index (its sheets are empty or charts)"


def _label(sheet: Any) -> str:
    hidden = " (hidden)" if sheet.sheet_state in ("hidden", "veryHidden") else ""
    return f"Sheet “{sheet.title}”{hidden}"


# --- reading a sheet's cells -----------------------------------------------------------


@dataclass
class _Row:
    number: int
    cells: dict[int, Cell]


@dataclass(frozen=True)
class _Merge:
    first_col: int
    first_row: int
    last_col: int
    last_row: int


@dataclass
class _Grid:
    rows: list[_Row] = field(default_factory=list)
    merges: list[_Merge] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _read_sheet(sheet: Any, budget: _Budget) -> _Grid:
    """The sheet's rows that hold values, within the limits, and its merged ranges."""
    grid = _Grid()
    cut_columns = False
    empty_run = 0  # rows the file holds without values (formatting), since the last value
    formats = _Formats(sheet)
    with sheet._get_source() as source:  # the sheet's XML part, streamed
        parser = _parser(sheet, source)
        # Absent rows cost nothing: the parser yields only the rows the file holds.
        for number, raw_cells in parser.parse():
            cells, cut = _row_cells(raw_cells, formats)
            cut_columns = cut_columns or cut
            if cells:
                budget.cells -= len(cells)
                if budget.cells < 0:
                    budget.exhausted_at = _cell_limit_note(sheet.title, number)
                    break
                grid.rows.append(_Row(number, cells))
                empty_run = 0
            elif not cut and (empty_run := empty_run + 1) >= MAX_EMPTY_RUN:
                grid.notes.append(
                    f"Sheet “{sheet.title}”: reading stopped at row {number:,} after "
                    f"{MAX_EMPTY_RUN:,} rows holding no values (formatting only); anything "
                    "below was not indexed"
                )
                break
        else:  # read to the end: the merged ranges, stored after the cells, were seen
            grid.merges = _merges(parser)
    if cut_columns:
        grid.notes.append(
            f"Sheet “{sheet.title}”: values right of column {get_column_letter(MAX_COLUMNS)} "
            f"(the {MAX_COLUMNS}th) were left out"
        )
    return grid


def _row_cells(raw_cells: list[dict[str, Any]], formats: _Formats) -> tuple[dict[int, Cell], bool]:
    """A row's filled cells by column, and whether it had values right of the column limit."""
    cells: dict[int, Cell] = {}
    cut = False
    for raw in raw_cells:
        if raw["column"] > MAX_COLUMNS:
            cut = cut or raw["value"] is not None
        elif (cell := _cell(raw, formats)) is not None:
            cells[raw["column"]] = cell
    return cells, cut


def _parser(sheet: Any, source: Any) -> WorkSheetParser:
    # What ReadOnlyWorksheet._cells_by_row passes (private parts, absent from the stubs).
    workbook = sheet.parent
    return WorkSheetParser(
        source,
        sheet._shared_strings,
        data_only=True,
        epoch=workbook.epoch,
        date_formats=workbook._date_formats,
        timedelta_formats=workbook._timedelta_formats,
    )


def _cell_limit_note(sheet: str, row: int) -> str:
    return (
        f"The workbook has more than {MAX_CELLS:,} filled cells; only the first {MAX_CELLS:,} "
        f"were indexed (sheet “{sheet}” stops before row {row:,})"
    )


def _merges(parser: WorkSheetParser) -> list[_Merge]:
    found = parser.merged_cells
    merges = []
    for merge in found.mergeCell if found is not None else ():
        try:
            first_col, first_row, last_col, last_row = range_boundaries(merge.ref)
        except (ValueError, TypeError):
            continue  # a damaged range: its cells stay as they are
        if first_col and first_row and last_col and last_row:  # not a whole row or column
            merges.append(_Merge(first_col, first_row, last_col, last_row))
    return merges


# --- a cell's value as the cell shows it ------------------------------------------------


class _Formats(dict[int, "_Fixed | None"]):
    """Each style's number format, compiled once (a sheet has few styles, many cells);
    a dict, so that the lookup for every number costs no Python call."""

    def __init__(self, sheet: ReadOnlyWorksheet):
        super().__init__()
        self._sheet = sheet

    def __missing__(self, style_id: int) -> _Fixed | None:
        try:
            cell = ReadOnlyCell(self._sheet, 1, 1, None, "n", style_id)
            number_format = str(cell.number_format)
        except (IndexError, KeyError, TypeError, AttributeError):  # a style the file lacks
            number_format = "General"
        self[style_id] = fixed = _Fixed.compile(number_format)
        return fixed


def _cell(raw: dict[str, Any], formats: _Formats) -> Cell | None:
    value = raw["value"]
    if value is None or value == "":
        return None
    if isinstance(value, str):  # text, or an error value such as #DIV/0!
        text = " ".join(value.split())
        return (text, raw["data_type"] == "s") if text else None
    if isinstance(value, bool):
        return ("TRUE" if value else "FALSE"), False
    if isinstance(value, int | float):
        fixed = formats[raw["style_id"]]
        return (fixed.show(value) if fixed else _general(value)), False
    return _moment(value), False


def _moment(value: object) -> str:
    """Dates and times (openpyxl turns date-formatted numbers into them) in ISO form."""
    if isinstance(value, datetime.datetime):
        if value.time() == datetime.time():
            return value.date().isoformat()
        return value.isoformat(" ", "seconds" if value.second else "minutes")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, datetime.time):
        return value.isoformat("seconds" if value.second else "minutes")
    if isinstance(value, datetime.timedelta):  # a duration format such as [h]:mm:ss
        minutes, seconds = divmod(round(value.total_seconds()), 60)
        hours, minutes = divmod(minutes, 60)
        return f"{hours}:{minutes:02}:{seconds:02}"
    return str(value)


def _general(value: float) -> str:
    """Excel's General format: integers without ".0", at most 15 significant digits."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".15g").upper()  # 0.1+0.2 reads 0.3; 1e+20 as Excel's 1E+20


# The digits of a number format: "0", "#,##0", "0.00", "#,##0.000" ...
_DIGITS = re.compile(r"(?P<integer>[#0,]*0)(?:\.(?P<decimals>0+))?")
_FORMAT_TOKEN = re.compile(r'"[^"]*"|\\.|\[[^\]]*\]|[_*].|.', re.S)
_FORMAT_CODES = set("#0?.,@/:;Ee")


@dataclass(frozen=True)
class _Fixed:
    """A number format that is cheap to follow: fixed decimals, thousands separators,
    percent, and text around the digits (currency). Others read as General."""

    prefix: str
    suffix: str
    places: Decimal
    grouping: str
    scale: int

    @classmethod
    def compile(cls, number_format: str) -> _Fixed | None:
        section = _first_section(number_format)
        # Digits inside quotes or brackets ("[$$-409]") are text: masked before the search.
        masked = "".join(
            part if len(part) == 1 else "~" * len(part) for part in _FORMAT_TOKEN.findall(section)
        )
        digits = _DIGITS.search(masked)
        if digits is None or number_format == "General":
            return None
        prefix = _format_literal(section[: digits.start()])
        suffix = _format_literal(section[digits.end() :])
        if prefix is None or suffix is None:
            return None
        return cls(
            prefix,
            suffix,
            places=Decimal(1).scaleb(-len(digits.group("decimals") or "")),
            grouping="," if "," in digits.group("integer") else "",
            scale=100 ** (prefix + suffix).count("%"),
        )

    def show(self, value: float) -> str:
        """Rounded half away from zero, as Excel does (not half to even)."""
        try:
            number = Decimal(repr(float(value))) * self.scale
            rounded = abs(number).quantize(self.places, rounding=ROUND_HALF_UP)
        except (InvalidOperation, ValueError, OverflowError):  # inf, nan, absurd exponents
            return _general(value)
        sign = "-" if number < 0 and rounded else ""
        return f"{sign}{self.prefix}{rounded:{self.grouping}f}{self.suffix}"


def _first_section(number_format: str) -> str:
    """The format for positive numbers: the part before the first unquoted ``;``."""
    kept = []
    for part in _FORMAT_TOKEN.findall(number_format):
        if part == ";":
            break
        kept.append(part)
    return "".join(kept)


def _format_literal(part: str) -> str | None:
    """The text a format prints around the digits, or None for codes not followed here
    (dates, fractions, scientific notation, text placeholders)."""
    out = []
    for token in _FORMAT_TOKEN.findall(part):
        if token.startswith('"'):
            out.append(token[1:-1])
        elif token.startswith("\\"):
            out.append(token[1:])
        elif token.startswith("[$"):  # currency: [$€-407] prints €
            out.append(token[2:-1].split("-")[0])
        elif token.startswith(("[", "_", "*")):  # colour or condition, padding, fill
            continue
        elif token.isalnum() or token in _FORMAT_CODES:
            return None
        else:
            out.append(token)
    return "".join(out)


# --- from cells to tables ----------------------------------------------------------------


@dataclass
class _Table:
    titles: list[str]
    rows: list[_Row]
    first_col: int
    last_col: int
    header_rows: int = 0
    numeric: set[int] = field(default_factory=set)  # columns with numbers in the body

    def add_body(self, rows: list[_Row]) -> None:
        self.rows += rows
        for row in rows:
            self.numeric.update(column for column, (_, is_text) in row.cells.items() if not is_text)


def _sheet_blocks(name: str, grid: _Grid, budget: _Budget) -> list[Block]:
    spreads = _Spreads(grid, budget)
    tables: list[_Table] = []
    pending: list[str] = []  # title blocks waiting for the table under them
    for rows in _blank_row_blocks(grid.rows):
        titles, body = _split_titles(rows)
        if not body:
            pending += titles
            continue
        if not pending and not titles and tables and _continues(tables[-1], body, spreads):
            tables[-1].add_body(body)
            continue
        table = _Table(pending + titles, body[:0], *_columns(body, spreads))
        table.header_rows = _header_rows(body, table, spreads)
        table.rows = body[: table.header_rows]
        table.add_body(body[table.header_rows :])
        tables.append(table)
        pending = []
    blocks = [block for table in tables for block in _table_blocks(name, table, spreads)]
    return blocks + [Block(title) for title in pending]


def _blank_row_blocks(rows: list[_Row]) -> Iterator[list[_Row]]:
    """Runs of rows with no blank row between them."""
    start = 0
    for index in range(1, len(rows) + 1):
        if index == len(rows) or rows[index].number > rows[index - 1].number + 1:
            yield rows[start:index]
            start = index


class _Spreads:
    """The sheet's merged ranges by the row of their top-left cell."""

    def __init__(self, grid: _Grid, budget: _Budget):
        self._budget = budget
        self._numbers = [row.number for row in grid.rows]
        self.by_origin = {(m.first_row, m.first_col): m for m in grid.merges}
        self.by_row: dict[int, list[_Merge]] = {}
        for merge in self.by_origin.values():
            self.by_row.setdefault(merge.first_row, []).append(merge)
        self.horizontal_rows = {m.first_row for m in grid.merges if m.last_col > m.first_col}

    def rows_within(self, merge: _Merge, upto: int, width: int) -> list[int]:
        """The numbers of the sheet's rows that ``merge`` spans, up to ``upto``; each row
        costs the budget ``width`` cells, so crafted ranges cannot cost more than cells."""
        low = bisect_left(self._numbers, merge.first_row)
        high = bisect_right(self._numbers, min(upto, merge.last_row))
        self._budget.spreads -= max(high - low, 0) * width
        return self._numbers[low:high] if self._budget.spreads >= 0 else []

    def width(self, row: int, column: int) -> int:
        merge = self.by_origin.get((row, column))
        return min(merge.last_col, MAX_COLUMNS) - column + 1 if merge else 1


def _split_titles(rows: list[_Row]) -> tuple[list[str], list[_Row]]:
    """Leading title rows (one value, at the block's left edge, over wider rows) and the
    rows under them; a block of one one-value row is a title of its own."""
    left = min(min(row.cells) for row in rows)
    titles: list[str] = []
    for index, row in enumerate(rows[:MAX_TITLE_ROWS]):
        below = rows[index + 1 :]
        alone = not below and index == 0
        if len(row.cells) != 1 or left not in row.cells:
            break
        if not alone and not any(len(other.cells) > 1 for other in below):
            break
        titles.append(row.cells[left][0])
    return titles, rows[len(titles) :]


def _columns(rows: list[_Row], spreads: _Spreads) -> tuple[int, int]:
    first = min(min(row.cells) for row in rows)
    last = max(
        column + spreads.width(row.number, column) - 1 for row in rows for column in row.cells
    )
    return first, last


def _header_rows(rows: list[_Row], table: _Table, spreads: _Spreads) -> int:
    """The header: rows with horizontally merged cells and the row under them, else the
    first row when it is all text (a corner or one column may be unlabelled)."""
    merged = 0
    while merged < min(MAX_TITLE_ROWS, len(rows) - 1) and (
        rows[merged].number in spreads.horizontal_rows
    ):
        merged += 1
    if merged:
        return merged + 1 if merged + 1 < len(rows) else merged
    if len(rows) < 2:
        return 0
    first = rows[0].cells
    if not all(is_text for _, is_text in first.values()):
        return 0
    width = table.last_col - table.first_col + 1
    if width == 1:  # a list of names has no header; "Amount" over numbers has
        return int(any(not is_text for row in rows[1:] for _, is_text in row.cells.values()))
    return int(len(first) >= width - 1)


def _continues(table: _Table, body: list[_Row], spreads: _Spreads) -> bool:
    """Whether rows after a blank row are more of ``table``: same columns, and a first
    row that neither repeats the header nor puts text where the table has numbers."""
    if _columns(body, spreads) != (table.first_col, table.last_col):
        return False
    first = body[0].cells
    if table.header_rows:
        header = table.rows[table.header_rows - 1].cells
        if {c: t for c, (t, _) in first.items()} == {c: t for c, (t, _) in header.items()}:
            return False
    return not any(is_text and column in table.numeric for column, (_, is_text) in first.items())


def _table_blocks(name: str, table: _Table, spreads: _Spreads) -> list[Block]:
    texts = {row.number: _row_texts(table, row) for row in table.rows}
    _spread(texts, table, spreads)
    caption = " — ".join([name, *table.titles])
    return table_blocks(list(texts.values()), caption=caption, header_rows=table.header_rows)


def _row_texts(table: _Table, row: _Row) -> list[str]:
    texts = [""] * (table.last_col - table.first_col + 1)
    for column, (text, _) in row.cells.items():
        texts[column - table.first_col] = text
    return texts


def _spread(texts: dict[int, list[str]], table: _Table, spreads: _Spreads) -> None:
    """Merged values into the cells they cover: across every column they span in the
    header (so a merged "2025" names "Q1" and "Q2"), down their first column in the body
    (so each row says its group). Other covered cells stay empty."""
    header_end = table.rows[table.header_rows - 1].number if table.header_rows else 0
    for row in table.rows:
        for merge in spreads.by_row.get(row.number, ()):
            value = row.cells.get(merge.first_col)
            if value is None:
                continue
            in_header = row.number <= header_end
            first = merge.first_col - table.first_col
            last = min(merge.last_col, table.last_col) - table.first_col if in_header else first
            upto = header_end if in_header else table.rows[-1].number
            for number in spreads.rows_within(merge, upto, last - first + 1):
                cells = texts.get(number)
                if cells is not None:
                    cells[first : last + 1] = [value[0]] * (last - first + 1)
