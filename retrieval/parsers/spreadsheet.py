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
skipped, and pages are numbered 1, 2, 3 over the sheets kept. A sheet's cells are laid out
as tables by ``tables.sheet_blocks``, as ODS and CSV sheets are: blank rows split it,
title rows caption the table under them, a block going on with a table's columns
continues it, and ``tables.split_header`` finds the header. This module gives it each
cell's type (text or not: "2025" typed as a number is no label) and the cells each merged
range covers, so a merged "2025" names "2025 Q1" and "2025 Q2" and a group merged down
names each of its rows. Values read as the cell shows them where that is cheap: dates as
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
from retrieval.parsers.sheets import SheetRow, sheet_blocks
from retrieval.parsers.table_headers import Hint
from retrieval.parsers.tables import MAX_COLUMNS
from retrieval.parsers.titles import named_title
from retrieval.types import Block, ParsedDocument, ParsedPage

MAX_CELLS = 1_000_000  # filled cells over the whole workbook
MAX_EMPTY_RUN = 1_000  # rows in a row that the file holds without values: the sheet ends
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


@dataclass(frozen=True)
class _Merge:
    first_col: int
    first_row: int
    last_col: int
    last_row: int


@dataclass
class _Grid:
    rows: list[SheetRow] = field(default_factory=list)
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
            row, cut = _row(number, raw_cells, formats)
            cut_columns = cut_columns or cut
            if row.cells:
                budget.cells -= len(row.cells)
                if budget.cells < 0:
                    budget.exhausted_at = _cell_limit_note(sheet.title, number)
                    break
                grid.rows.append(row)
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


def _row(number: int, raw_cells: list[dict[str, Any]], formats: _Formats) -> tuple[SheetRow, bool]:
    """A row's filled cells by column, each typed as text or not, and whether it had
    values right of the column limit."""
    row = SheetRow(number, {})
    cut = False
    for raw in raw_cells:
        if raw["column"] > MAX_COLUMNS:
            cut = cut or raw["value"] is not None
        elif (cell := _cell(raw, formats)) is not None:
            row.cells[raw["column"]], is_text = cell
            row.hints[raw["column"]] = Hint.TEXT if is_text else Hint.NUMBER
    return row, cut


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


# --- merged ranges as hints for the one sheet layout ------------------------------------


def _sheet_blocks(name: str, grid: _Grid, budget: _Budget) -> list[Block]:
    _mark_merges(grid, budget)
    return sheet_blocks(name, grid.rows)


def _mark_merges(grid: _Grid, budget: _Budget) -> None:
    """Mark the cells each merged range covers, in the rows the sheet holds, as covered
    from the left or from above (``tables.Hint``); ``tables.sheet_blocks`` spreads the
    merged value into them. Each covered row costs the budget the range's width, so
    crafted ranges (overlapping, a million rows tall) cannot cost more than cells."""
    numbers = [row.number for row in grid.rows]
    for merge in grid.merges:
        low = bisect_left(numbers, merge.first_row)
        high = bisect_right(numbers, merge.last_row)
        last = min(merge.last_col, MAX_COLUMNS)
        budget.spreads -= max(high - low, 0) * (last - merge.first_col + 1)
        if budget.spreads < 0:
            return
        for row in grid.rows[low:high]:
            below = Hint.BELOW if row.number > merge.first_row else Hint.NONE
            for column in range(merge.first_col, last + 1):
                across = Hint.ACROSS if column > merge.first_col else Hint.NONE
                if below or across:
                    row.hints[column] = row.hints.get(column, Hint.NONE) | below | across
