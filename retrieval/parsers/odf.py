"""OpenDocument text, spreadsheets and presentations (ODT, ODS, ODP) with one reader.

An ODF file is a ZIP package: ``mimetype`` (first, stored) names the kind, ``content.xml``
holds the body, ``meta.xml`` the title, ``META-INF/manifest.xml`` says whether parts are
encrypted. Only those parts are read: never ``styles.xml`` (headers, footers, master
pages are boilerplate), scripts (macros are never run), embedded objects or images, and a
formula (``table:formula``) is never evaluated: a cell reads as its displayed text.

The XML is read with defusedxml's ElementTree (PSF licence), which refuses DTDs and
entities, after :func:`~retrieval.parsers.office_archive.check_archive` has refused bombs,
DTDs and crafted part names. It is read streaming (``iterparse``): each finished unit of
the body (a top-level paragraph or table, a slide, a sheet's row) is read and then dropped,
so a large document is never held as one tree. odfpy is not used: it has been
unmaintained since 2020 and hands XML to a parser without entity protection.

- ODT: one page (ODT has no fixed pages; chapters are not pages). ``text:h`` (and
  paragraphs styled Title) are headings; paragraphs and list items are paragraphs, with
  ``text:s``, ``text:tab`` and ``text:line-break`` spelled out; footnotes and text boxes
  follow the paragraph they are anchored in; comments, tracked deletions and index
  templates are left out. Tables go through :func:`tables.grid_blocks`, their header
  at least the ``table:table-header-rows`` (:func:`tables.split_header` finds more
  under merged cells, or guesses it), their caption the nearest heading above or the
  table's name.
- ODS: a page per sheet with cells, numbered over the sheets kept ("Sheet “Prices”";
  "(hidden)" after a hidden sheet's name: it is read too). A sheet is laid out as an
  XLSX sheet is, by :func:`tables.sheet_blocks`: blank rows split it into tables
  captioned with the sheet's name and the title rows above them (a title in A1 over a
  blank row, then the header). Cells typed as numbers, dates or truth values are data,
  not labels; a merged cell's text fills the cells it covers in the header (a merged
  "2025" names each quarter) and down its first column in the body. Repetitions are
  bounded: a repeated empty row or cell costs nothing however large its count (a sheet
  of 1,048,576 repeated empty rows takes milliseconds), a repeated filled cell is
  expanded up to ``tables.MAX_COLUMNS``.
- ODP: a page per slide, empty ones too ("Slide 3: Budget" when it has a title frame,
  "Slide 4 (hidden)" for a slide hidden in the show, still read), the title as heading,
  then the shapes' text and tables in document order, then the speaker notes ("Notes: ").

Limits, refused at once with the reason: more than 1,000,000 filled table cells
(repetitions and the cells merges cover counted), more than 5,000 slides, XML nested over
200 levels, and encrypted packages (a password protects them; we do not ask for it).
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from xml.etree.ElementTree import Element  # the type only: defusedxml parses

import defusedxml.ElementTree as SafeTree
from defusedxml import DefusedXmlException

from retrieval.parsers.errors import ParseError
from retrieval.parsers.office_archive import check_archive
from retrieval.parsers.sheets import SheetRow, sheet_blocks
from retrieval.parsers.table_headers import Hint, grid_blocks
from retrieval.parsers.tables import MAX_COLUMNS
from retrieval.parsers.text import clean_text, single_page
from retrieval.parsers.titles import named_title
from retrieval.types import Block, ParsedDocument, ParsedPage

__all__ = ["MAX_CELLS", "MAX_SLIDES", "parse_odp", "parse_ods", "parse_odt"]

MAX_CELLS = 1_000_000  # filled cells, repetitions counted: far above any sheet people read
MAX_SLIDES = 5_000
MAX_DEPTH = 200  # real documents nest a few dozen levels (lists in tables in frames)
_MAX_LABEL_CHARS = 120

_NAMESPACES = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
    "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
    "svg": "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0",
    "dc": "http://purl.org/dc/elements/1.1/",
    "manifest": "urn:oasis:names:tc:opendocument:xmlns:manifest:1.0",
}


def _q(name: str) -> str:
    """``text:p`` as ElementTree spells it (``{urn:...:text:1.0}p``)."""
    prefix, local = name.split(":")
    return f"{{{_NAMESPACES[prefix]}}}{local}"


_DRAW_PREFIX = _q("draw:x")[:-1]
_TEXT_BODY = _q("office:text")
_SPREADSHEET = _q("office:spreadsheet")
_PRESENTATION = _q("office:presentation")
_AUTOMATIC_STYLES = _q("office:automatic-styles")
_P, _H = _q("text:p"), _q("text:h")
_S, _TAB, _LINE_BREAK, _NOTE = _q("text:s"), _q("text:tab"), _q("text:line-break"), _q("text:note")
_TABLE, _ROW, _CELL = _q("table:table"), _q("table:table-row"), _q("table:table-cell")
_COVERED = _q("table:covered-table-cell")
_HEADER_ROWS = _q("table:table-header-rows")
_ROW_CONTAINERS = frozenset({_q("table:table-rows"), _q("table:table-row-group")})
_PAGE, _NOTES = _q("draw:page"), _q("presentation:notes")
_GROUP = _q("draw:g")
_DC_TITLE = _q("dc:title")
_ENCRYPTION_DATA = _q("manifest:encryption-data")
_STYLE, _STYLE_FAMILY = _q("style:style"), _q("style:family")
# A sheet's table style with display false, a slide's page style with visibility hidden.
_HIDING = {
    "table": (_q("style:table-properties"), _q("table:display"), "false"),
    "drawing-page": (
        _q("style:drawing-page-properties"),
        _q("presentation:visibility"),
        "hidden",
    ),
}

_CLASS = _q("presentation:class")
_STYLE_NAME = _q("text:style-name")
_TABLE_NAME = _q("table:name")
_TABLE_STYLE = _q("table:style-name")
_PAGE_STYLE = _q("draw:style-name")
_COLUMNS_REPEATED = _q("table:number-columns-repeated")
_ROWS_REPEATED = _q("table:number-rows-repeated")
_COLUMNS_SPANNED = _q("table:number-columns-spanned")
_ROWS_SPANNED = _q("table:number-rows-spanned")
_VALUE_TYPE = _q("office:value-type")
# A typed value is data, never a label; a string (even "2025") is text.
_VALUE_HINTS = {"string": Hint.TEXT} | {
    kind: Hint.NUMBER for kind in ("float", "percentage", "currency", "date", "time", "boolean")
}
# A cell's value when it has no displayed text (a generator wrote only the value).
_VALUES = tuple(
    _q(f"office:{name}")
    for name in ("string-value", "value", "date-value", "time-value", "boolean-value")
)

# Never text of the document: comments, deleted text kept for change tracking, index
# templates, declarations, forms, embedded objects and images (base64 data), alt text.
_SKIPPED = frozenset(
    _q(name)
    for name in (
        "office:annotation",
        "office:annotation-end",
        "office:forms",
        "office:event-listeners",
        "office:binary-data",
        "text:tracked-changes",
        "text:sequence-decls",
        "text:variable-decls",
        "text:user-field-decls",
        "text:dde-connection-decls",
        "text:soft-page-break",
        "text:note-citation",
        "text:table-of-content-source",
        "text:illustration-index-source",
        "text:table-index-source",
        "text:object-index-source",
        "text:user-index-source",
        "text:alphabetical-index-source",
        "text:bibliography-source",
        "table:table-columns",
        "table:table-column",
        "table:table-column-group",
        "table:table-header-columns",
        "draw:image",
        "draw:object",
        "draw:object-ole",
        "draw:applet",
        "draw:plugin",
        "draw:floating-frame",
        "draw:page-thumbnail",
        "svg:title",
        "svg:desc",
        "presentation:notes",
    )
)
# A slide's footer, date and page number: the same on every slide, and on no slide's topic.
_BOILERPLATE_CLASSES = frozenset({"header", "footer", "date-time", "page-number"})
_INLINE_SKIPPED = frozenset(_q(n) for n in ("office:annotation", "office:annotation-end"))
_XML_WHITESPACE = str.maketrans("\n\r\t", "   ")  # ODF reads them as spaces
# LibreOffice names tables "Table1", "Tabelle1", "Tableau1" ... in each UI language: no caption.
_DEFAULT_TABLE_NAME = re.compile(r"[^\W\d_]+ ?\d+")


def parse_odt(data: bytes, fallback_title: str) -> ParsedDocument:
    with _package(data, "ODT") as archive:
        title = _meta_title(archive, "ODT")
        blocks = _text_blocks(archive)
    title = title or next(_headings(blocks), fallback_title)
    return single_page(title, blocks)


def parse_ods(data: bytes, fallback_title: str) -> ParsedDocument:
    with _package(data, "ODS") as archive:
        title = _meta_title(archive, "ODS")
        pages = _sheets(archive)
    return ParsedDocument(title=title or fallback_title, pages=tuple(pages))


def parse_odp(data: bytes, fallback_title: str) -> ParsedDocument:
    with _package(data, "ODP") as archive:
        title = _meta_title(archive, "ODP")
        pages = _slides(archive)
    if not title:
        title = next(_headings(b for page in pages for b in page.blocks), fallback_title)
    return ParsedDocument(title=title, pages=tuple(pages))


def _headings(blocks: Iterable[Block]) -> Iterator[str]:
    """Heading texts, not tables' header rows (also marked ``is_heading``)."""
    return (block.text for block in blocks if block.is_heading and block.table is None)


# --- The package ---------------------------------------------------------------------


def _package(data: bytes, fmt: str) -> zipfile.ZipFile:
    """The checked, unencrypted package, open (the caller closes it)."""
    try:
        check_archive(data, fmt, "content.xml")
    except ParseError:
        # ODF 1.4's whole-package encryption leaves no content.xml to find.
        if _has_member(data, "encrypted-package"):
            raise _encrypted(fmt) from None
        raise
    except NotImplementedError as exc:  # before RuntimeError, whose subclass it is
        raise ParseError(f"the {fmt} is damaged (a part uses an unknown compression)") from exc
    except RuntimeError as exc:  # zipfile: a part is encrypted with a ZIP password
        raise _encrypted(fmt) from exc
    archive = zipfile.ZipFile(io.BytesIO(data))
    try:
        encrypted = _is_encrypted(archive, fmt)
    except ParseError:
        archive.close()
        raise
    if encrypted:
        archive.close()
        raise _encrypted(fmt)
    return archive


def _encrypted(fmt: str) -> ParseError:
    return ParseError(f"the {fmt} is encrypted; upload an unprotected copy")


def _has_member(data: bytes, name: str) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return name in archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def _is_encrypted(archive: zipfile.ZipFile, fmt: str) -> bool:
    """Whether the manifest gives any part encryption data (the part is then ciphertext)."""
    if "META-INF/manifest.xml" not in archive.namelist():
        return False
    for event, element, _ in _read(archive, "META-INF/manifest.xml", fmt):
        if element.tag == _ENCRYPTION_DATA:
            return True
        if event == "end":
            element.clear()  # one entry per part: nothing is kept
    return False


def _meta_title(archive: zipfile.ZipFile, fmt: str) -> str | None:
    """``dc:title`` unless it names no document; a broken meta.xml only loses the title."""
    if "meta.xml" not in archive.namelist():
        return None
    try:
        for event, element, _ in _read(archive, "meta.xml", fmt):
            if event == "end" and element.tag == _DC_TITLE:
                return named_title("".join(element.itertext()))
            if event == "end":
                element.clear()
    except ParseError:
        return None
    return None


_Events = Iterator[tuple[str, Element, list[Element]]]


def _read(archive: zipfile.ZipFile, name: str, fmt: str) -> _Events:
    """The part's start and end events, each with the element's open ancestors.

    DTDs are refused again here: ``check_archive`` looks at a part's first 64 KiB, and a
    comment may push a DTD past them.
    """
    ancestors: list[Element] = []
    try:
        with archive.open(name) as part:
            events = SafeTree.iterparse(part, events=("start", "end"), forbid_dtd=True)
            for event, element in events:
                if event == "start":
                    if len(ancestors) >= MAX_DEPTH:
                        raise ParseError(
                            f"the {fmt} is nested more than {MAX_DEPTH} levels deep; refused"
                        )
                    yield event, element, ancestors
                    ancestors.append(element)
                else:
                    ancestors.pop()
                    yield event, element, ancestors
    except SafeTree.ParseError as exc:
        raise ParseError(f"the {fmt} is damaged ({name} is not well-formed XML)") from exc
    except DefusedXmlException as exc:
        raise ParseError(f"the {fmt} contains XML entity declarations, refused") from exc
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        raise ParseError(f"the {fmt} is damaged ({name} cannot be decompressed)") from exc


def _finished(events: _Events, parents: frozenset[str]) -> Iterator[tuple[str, Element]]:
    """Each element under one of ``parents``, with its parent's tag, once read whole; it
    is then dropped from the tree, so that memory holds one such element at a time."""
    for event, element, ancestors in events:
        if event == "end" and ancestors and ancestors[-1].tag in parents:
            yield ancestors[-1].tag, element
            ancestors[-1].remove(element)


# --- Text ------------------------------------------------------------------------------


def _inline(paragraph: Element, later: list[Element]) -> str:
    """A paragraph's text, ODF's spacing elements spelled out and line breaks kept.

    Notes and frames anchored in it are put in ``later``: they are blocks of their own
    (a footnote's text in the middle of a sentence would break the sentence).
    """
    parts: list[str] = []
    _collect(paragraph, parts, later)
    lines = (" ".join(line.split()) for line in clean_text("".join(parts)).split("\n"))
    return "\n".join(line for line in lines if line)


def _collect(element: Element, parts: list[str], later: list[Element]) -> None:
    if element.text:
        parts.append(element.text.translate(_XML_WHITESPACE))
    for child in element:
        tag = child.tag
        if tag in (_S, _TAB):
            parts.append(" ")  # runs of spaces are collapsed anyway
        elif tag == _LINE_BREAK:
            parts.append("\n")
        elif tag == _NOTE or tag.startswith(_DRAW_PREFIX):
            later.append(child)
        elif tag not in _INLINE_SKIPPED:
            _collect(child, parts, later)
        if child.tail:
            parts.append(child.tail.translate(_XML_WHITESPACE))


def _hiding_style(style: Element) -> str | None:
    """The name of an automatic style that hides the sheet or slide using it."""
    hiding = _HIDING.get(style.get(_STYLE_FAMILY) or "")
    if style.tag != _STYLE or hiding is None:
        return None
    properties, attribute, value = hiding
    hides = any(p.get(attribute) == value for p in style.iter(properties))
    return style.get(_q("style:name")) if hides else None


def _flat_text(element: Element) -> str:
    """All the text of block content (a cell, a shape) on one line, paragraphs in order;
    a table nested in it reads as its cells' text."""
    parts: list[str] = []
    for child in element:
        if child.tag in (_P, _H):
            later: list[Element] = []
            parts.append(_inline(child, later))
            parts.extend(_flat_text(item) for item in later)
        elif child.tag not in _SKIPPED:
            parts.append(_flat_text(child))
    return " ".join(" ".join(part.split()) for part in parts if part)


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _Blocks:
    """Block content (paragraphs, headings, lists, sections, tables) in reading order."""

    def __init__(self, budget: _Budget, heading: str = ""):
        self.blocks: list[Block] = []
        self.heading = heading  # the nearest heading above: a table's caption
        self._budget = budget
        self._title_styles = {"Title"}

    def note_style(self, style: Element) -> None:
        """Remember automatic paragraph styles derived from Title (LibreOffice's title
        paragraph is a ``text:p``, not a ``text:h``)."""
        if style.get(_q("style:parent-style-name")) in self._title_styles:
            name = style.get(_q("style:name"))
            if name and style.get(_q("style:family")) == "paragraph":
                self._title_styles.add(name)

    def add(self, element: Element) -> None:
        tag = element.tag
        if tag == _H:
            self._paragraph(element, heading=True)
        elif tag == _P:
            self._paragraph(element, heading=element.get(_STYLE_NAME) in self._title_styles)
        elif tag == _TABLE:
            caption = self.heading or _table_name(element)
            self.blocks.extend(_Rows.of_table(element, self._budget).blocks(caption))
        elif tag not in _SKIPPED and element.get(_CLASS) not in _BOILERPLATE_CLASSES:
            for child in element:
                self.add(child)

    def _paragraph(self, element: Element, heading: bool) -> None:
        later: list[Element] = []
        text = _inline(element, later)
        if heading:
            text = _one_line(text)
        if text:
            self.blocks.append(Block(text, is_heading=heading))
            if heading:
                self.heading = text
        for item in later:
            self.add(item)


def _text_blocks(archive: zipfile.ZipFile) -> list[Block]:
    reader = _Blocks(_Budget("ODT"))
    body = _finished(
        _read(archive, "content.xml", "ODT"), frozenset({_TEXT_BODY, _AUTOMATIC_STYLES})
    )
    for parent, element in body:
        if parent == _AUTOMATIC_STYLES:
            reader.note_style(element)
        else:
            reader.add(element)
    return reader.blocks


# --- Tables ----------------------------------------------------------------------------


class _Budget:
    """Filled cells left to read in the whole document."""

    def __init__(self, fmt: str):
        self._fmt = fmt
        self._left = MAX_CELLS

    def take(self, cells: int) -> None:
        self._left -= cells
        if self._left < 0:
            raise ParseError(
                f"the {self._fmt} has more than {MAX_CELLS:,} filled table cells (repeated "
                "cells counted); split it into smaller files"
            )


class _Rows:
    """A table's rows: filled cells by column, typed (``tables.Hint``) and merged cells
    marked, repetitions bounded.

    Rows are numbered with their repetitions, so that blank rows split a sheet where they
    stand and a merge over rows that follow a repeated row ends where it should.
    """

    def __init__(self, budget: _Budget):
        self.rows: list[SheetRow] = []
        self._budget = budget
        self._row = 0  # rows so far, repetitions counted
        # column: the merge covering it (its first column and row, the row it ends before)
        self._merged: dict[int, tuple[int, int, int]] = {}

    @classmethod
    def of_table(cls, table: Element, budget: _Budget) -> _Rows:
        rows = cls(budget)
        for row, in_header in _table_rows(table, in_header=False):
            rows.add(row, in_header)
        return rows

    def add(self, row: Element, in_header: bool) -> None:
        cells, hints = self._cells(row)
        first = self._row + 1
        repeat = _count(row.get(_ROWS_REPEATED))
        self._row += repeat
        if not cells:
            return  # empty rows cost nothing, however many are repeated
        self._budget.take(len(cells) * repeat)  # before expanding: the count may be huge
        self.rows.extend(SheetRow(first + k, cells, hints, in_header) for k in range(repeat))

    def blocks(self, caption: str) -> list[Block]:
        """The rows as one table (a text's or a slide's; a sheet's are laid out by
        ``tables.sheet_blocks``)."""
        if not self.rows:
            return []
        columns = range(max(c for row in self.rows for c in (*row.cells, *row.hints)) + 1)
        texts = [[row.cells.get(c, "") for c in columns] for row in self.rows]
        hints = [[row.hints.get(c, Hint.NONE) for c in columns] for row in self.rows]
        marked = next((r for r, row in enumerate(self.rows) if not row.marked), len(self.rows))
        return grid_blocks(texts, hints, caption=caption, marked=marked)

    def _cells(self, row: Element) -> tuple[dict[int, str], dict[int, Hint]]:
        cells: dict[int, str] = {}
        hints: dict[int, Hint] = {}
        column = 0
        for cell in row:
            if column >= MAX_COLUMNS:
                break
            if cell.tag not in (_CELL, _COVERED):
                continue
            repeat = _count(cell.get(_COLUMNS_REPEATED))
            spanned = range(column, min(column + repeat, MAX_COLUMNS))
            if cell.tag == _COVERED:
                self._covered(spanned, hints)
            elif text := _cell_value(cell):  # empty cells only move the column
                self._merge(cell, column)
                hint = _VALUE_HINTS.get(cell.get(_VALUE_TYPE) or "", Hint.NONE)
                cells.update(dict.fromkeys(spanned, text))
                hints.update(dict.fromkeys(spanned, hint))
            else:
                self._merge(cell, column)
            column += repeat
        return cells, hints

    def _merge(self, cell: Element, column: int) -> None:
        columns = _count(cell.get(_COLUMNS_SPANNED))
        rows = _count(cell.get(_ROWS_SPANNED))
        if columns > 1 or rows > 1:
            for spanned in range(column, min(column + columns, MAX_COLUMNS)):
                self._merged[spanned] = (column, self._row, self._row + rows)

    def _covered(self, columns: range, hints: dict[int, Hint]) -> None:
        """Mark the covered cells as covered from the left or from above; each costs the
        budget a cell, so a crafted sheet of covered cells stays bounded."""
        self._budget.take(len(columns))
        for column in columns:
            first_column, first_row, end = self._merged.get(column, (0, 0, 0))
            if self._row < end:
                across = Hint.ACROSS if column > first_column else Hint.NONE
                hints[column] = across | (Hint.BELOW if self._row > first_row else Hint.NONE)


def _table_rows(element: Element, in_header: bool) -> Iterator[tuple[Element, bool]]:
    for child in element:
        if child.tag == _ROW:
            yield child, in_header
        elif child.tag == _HEADER_ROWS:
            yield from _table_rows(child, in_header=True)
        elif child.tag in _ROW_CONTAINERS:
            yield from _table_rows(child, in_header)


def _cell_value(cell: Element) -> str:
    """The displayed text (as the producer formatted it: "12 %", "3 Mar 2025"); the stored
    value only when there is none. A formula is never evaluated."""
    text = _flat_text(cell)
    if text:
        return text
    return next((value for name in _VALUES if (value := cell.get(name))), "")


def _count(value: str | None) -> int:
    """A repetition or span count; anything but a positive number counts as one."""
    try:
        return max(int(value), 1) if value else 1
    except ValueError:  # not a number, or more digits than int() converts
        return 1


def _table_name(table: Element) -> str:
    name = _one_line(table.get(_TABLE_NAME) or "")
    return "" if _DEFAULT_TABLE_NAME.fullmatch(name) else name


# --- Sheets ----------------------------------------------------------------------------


def _sheets(archive: zipfile.ZipFile) -> list[ParsedPage]:
    """A page per sheet with cells; each sheet's rows are read and dropped one by one."""
    budget = _Budget("ODS")
    pages: list[ParsedPage] = []
    hiding: set[str] = set()
    rows = _Rows(budget)
    name = ""
    for event, element, ancestors in _read(archive, "content.xml", "ODS"):
        tag = element.tag
        parent = ancestors[-1].tag if ancestors else ""
        if tag == _TABLE and parent == _SPREADSHEET:
            if event == "start":
                rows, name = _Rows(budget), _one_line(element.get(_TABLE_NAME) or "")
                continue
            blocks = sheet_blocks(name, rows.rows)
            if blocks:
                hidden = element.get(_TABLE_STYLE) in hiding
                label = _sheet_label(name, len(pages) + 1, hidden)
                pages.append(ParsedPage(len(pages) + 1, tuple(blocks), label))
            ancestors[-1].remove(element)
        elif event == "end" and parent == _AUTOMATIC_STYLES:
            if style := _hiding_style(element):
                hiding.add(style)
            ancestors[-1].remove(element)
        elif event == "end" and tag == _ROW:
            place = _sheet_row(ancestors)
            if place is not None:
                rows.add(element, in_header=place)
                ancestors[-1].remove(element)
    return pages


def _sheet_row(ancestors: Sequence[Element]) -> bool | None:
    """For a row of a sheet (not of a table nested in a cell): whether it is in the
    sheet's header rows; None for any other row."""
    for index in range(len(ancestors) - 1, 0, -1):
        if ancestors[index].tag == _TABLE:
            if ancestors[index - 1].tag != _SPREADSHEET:
                return None
            return any(a.tag == _HEADER_ROWS for a in ancestors[index + 1 :])
    return None


def _sheet_label(name: str, number: int, hidden: bool) -> str:
    label = f"Sheet “{_short(name)}”" if name else f"Sheet {number}"
    return f"{label} (hidden)" if hidden else label


def _short(text: str) -> str:
    if len(text) <= _MAX_LABEL_CHARS:
        return text
    return text[: _MAX_LABEL_CHARS - 1].rstrip() + "…"


# --- Slides ----------------------------------------------------------------------------


def _slides(archive: zipfile.ZipFile) -> list[ParsedPage]:
    """A page per slide, empty ones included, so that "Slide n" is the slide people see."""
    budget = _Budget("ODP")
    pages: list[ParsedPage] = []
    hiding: set[str] = set()
    parents = frozenset({_PRESENTATION, _AUTOMATIC_STYLES})
    for parent, element in _finished(_read(archive, "content.xml", "ODP"), parents):
        if parent == _AUTOMATIC_STYLES:
            if style := _hiding_style(element):
                hiding.add(style)
            continue
        if element.tag != _PAGE:
            continue
        if len(pages) == MAX_SLIDES:
            raise ParseError(
                f"the ODP has more than {MAX_SLIDES:,} slides; split it into smaller files"
            )
        hidden = element.get(_PAGE_STYLE) in hiding
        pages.append(_slide(element, len(pages) + 1, budget, hidden))
    return pages


def _slide(page: Element, number: int, budget: _Budget, hidden: bool) -> ParsedPage:
    shapes = list(_shapes(page))
    titles = ((s, _flat_text(s)) for s in shapes if s.get(_CLASS) == "title")
    title_shape, title = next(((s, text) for s, text in titles if text), (None, ""))
    reader = _Blocks(budget, heading=title)
    if title:
        reader.blocks.append(Block(title, is_heading=True))
    for shape in shapes:
        if shape is not title_shape:
            reader.add(shape)
    notes = page.find(_NOTES)
    if notes is not None:
        notes_reader = _Blocks(budget)
        for child in notes:
            notes_reader.add(child)
        text = "\n".join(block.text for block in notes_reader.blocks)
        if text:
            reader.blocks.append(Block(f"Notes: {text}"))
    label = f"Slide {number} (hidden)" if hidden else f"Slide {number}"
    label = f"{label}: {_short(title)}" if title else label
    return ParsedPage(number, tuple(reader.blocks), label)


def _shapes(element: Element) -> Iterator[Element]:
    """The shapes of a slide in document order, groups opened."""
    for child in element:
        if child.tag == _GROUP:
            yield from _shapes(child)
        elif child.tag != _NOTES:
            yield child
