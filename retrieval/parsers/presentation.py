"""PowerPoint presentations (PPTX) through python-pptx: one page per slide.

Each slide is a page labelled "Slide n" (with its title when it has one, and "hidden" when
the slide is hidden in the slide show; hidden slides are still read). A slide's blocks are
its title as a heading, then the text of its shapes in reading order (top to bottom, left
to right, group shapes opened), its tables through the one table model
(``retrieval/parsers/tables.py``, captioned with the slide's title; the header is the
row PowerPoint flags as one, and the row under it when cells merged down or across say
so), and last its speaker notes, prefixed "Notes: ".

Why python-pptx: it is the maintained reader of PresentationML in Python, under the MIT
licence (its one compiled dependency, lxml, is BSD), and it is the sibling of python-docx,
which reads DOCX here already. Its XML parser never resolves entities, it skips external
relationships when it loads a package (a linked picture, a hyperlink or an external OLE
object is never fetched), and :func:`check_archive` refuses ZIP bombs and entity
declarations before it reads anything.

Not read: pictures, charts, SmartArt, media, OLE objects and ink; only text frames,
tables and notes carry text here. Macros in a ``.pptm`` are never run (python-pptx does
not even load them as code).

Limits: a deck of more than ``MAX_SLIDES`` slides is refused, judged from the slide list
before any slide is read (the largest real decks run to a few thousand slides; today the
ZIP checks' 2,000 parts come first, at about 500 slides with notes, as each slide is two
parts and its notes two more). A slide list naming one slide twice is refused: PowerPoint
never writes one, and re-reading a large slide thousands of times would be a cheap way to
burn the parser's time budget. Reading order, merged cells and inherited placeholder
positions are each worked out in one pass, so a crafted slide costs time in proportion to
its size (python-pptx's own position lookup is quadratic). A 200-slide deck with a table,
a text box and notes on every slide parses in about 0.25 s; 1,000 slides in 1.4 s.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import Any

import pptx
from pptx.enum.shapes import PP_PLACEHOLDER
from pptx.exc import PackageNotFoundError
from pptx.presentation import Presentation
from pptx.shapes.base import BaseShape
from pptx.shapes.group import GroupShape
from pptx.slide import Slide, SlideMaster
from pptx.table import Table
from pptx.text.text import TextFrame

from retrieval.parsers.errors import ParseError
from retrieval.parsers.office_archive import check_archive
from retrieval.parsers.table_headers import Hint, grid_blocks
from retrieval.parsers.text import clean_text
from retrieval.parsers.titles import named_title
from retrieval.types import Block, ParsedDocument, ParsedPage

MAX_SLIDES = 5_000
# A slide is two parts (the slide and its relationships), its notes two more.
_MAX_PARTS = 4 * MAX_SLIDES + 1_000
# A text frame up to this long stays one block (a slide's bullet list reads as one unit);
# a longer one, a page of prose pasted on a slide, is a block per paragraph.
KEEP_TOGETHER_CHARS = 600
_MAIN_PART = "ppt/presentation.xml"
# Encrypted Office files, and the old binary .ppt, are OLE compound files, not ZIPs.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# What PowerPoint and python-pptx put in the title of a deck nobody named.
_PLACEHOLDER_TITLES = {"powerpoint presentation"}


def parse_pptx(data: bytes, fallback_title: str) -> ParsedDocument:
    if data.startswith(_OLE_MAGIC):
        raise ParseError(
            "this presentation is password-protected or in the old binary PowerPoint "
            "format (.ppt); save it as an unprotected .pptx and upload it again"
        )
    # Bombs and DTDs are refused before python-pptx parses any XML.
    check_archive(data, "PPTX", _MAIN_PART, max_members=_MAX_PARTS)
    deck = _open(data)
    _check_slide_count(deck)
    positions = _Positions()
    pages = tuple(_page(number, slide, positions) for number, slide in enumerate(_slides(deck), 1))
    return ParsedDocument(title=_document_title(deck, pages, fallback_title), pages=pages)


def _open(data: bytes) -> Presentation:
    try:
        return pptx.Presentation(io.BytesIO(data))
    # lxml's XMLSyntaxError is a SyntaxError (lxml has no type stubs to name it by).
    except (PackageNotFoundError, KeyError, SyntaxError) as exc:
        raise ParseError("not a valid PPTX file (its parts are damaged or missing)") from exc
    except ValueError as exc:  # the main part is a template, slide show or other type
        raise ParseError(
            "not a PowerPoint presentation (templates and slide shows: save as .pptx)"
        ) from exc


def _check_slide_count(deck: Presentation) -> None:
    # From the slide list itself: ``deck.slides`` first renames every slide part in it.
    slide_list = deck.element.sldIdLst
    count: int = 0 if slide_list is None else len(slide_list.sldId_lst)
    if count > MAX_SLIDES:
        raise ParseError(
            f"the presentation has {count:,} slides; at most {MAX_SLIDES:,} are accepted"
        )


def _slides(deck: Presentation) -> Iterator[Slide]:
    seen: dict[str, int] = {}
    try:
        for number, slide in enumerate(deck.slides, 1):
            name = str(slide.part.partname)
            if name in seen:
                raise ParseError(
                    f"the PPTX lists one slide twice (slides {seen[name]} and {number}); "
                    "such a file is not made by PowerPoint, refused"
                )
            seen[name] = number
            yield slide
    except (KeyError, ValueError, AttributeError) as exc:
        # The slide list names a relationship that is missing, external, or not a slide.
        raise ParseError("not a valid PPTX file (a slide it lists is missing)") from exc


def _page(number: int, slide: Slide, positions: _Positions) -> ParsedPage:
    title_shape = slide.shapes.title
    title = _one_line(title_shape.text_frame.text) if title_shape is not None else ""
    blocks = [Block(title, is_heading=True)] if title else []
    title_id = title_shape.shape_id if title_shape is not None else None
    shapes = [shape for shape in slide.shapes if shape.shape_id != title_id]
    for shape in sorted(shapes, key=positions.on(slide)):
        blocks.extend(_shape_blocks(shape, title))
    blocks.extend(_notes_blocks(slide))
    return ParsedPage(number=number, blocks=tuple(blocks), label=_label(number, slide, title))


def _label(number: int, slide: Slide, title: str) -> str:
    label = f"Slide {number}"
    if slide.element.get("show") in ("0", "false"):  # hidden in the slide show
        label += " (hidden)"
    return f"{label}: {title}" if title else label


_Point = tuple[int, int]  # top, left, in EMU
_NOWHERE: _Point = (0, 0)  # a shape placed nowhere reads first
# The master placeholder a layout placeholder of each type takes its place from (as
# python-pptx maps them); every other type takes the body's.
_MASTER_KIND = {
    PP_PLACEHOLDER.TITLE: PP_PLACEHOLDER.TITLE,
    PP_PLACEHOLDER.CENTER_TITLE: PP_PLACEHOLDER.TITLE,
    PP_PLACEHOLDER.DATE: PP_PLACEHOLDER.DATE,
    PP_PLACEHOLDER.FOOTER: PP_PLACEHOLDER.FOOTER,
    PP_PLACEHOLDER.SLIDE_NUMBER: PP_PLACEHOLDER.SLIDE_NUMBER,
    PP_PLACEHOLDER.HEADER: PP_PLACEHOLDER.HEADER,
}


class _Positions:
    """Where shapes stand on their slide, for reading order (top to bottom, then left to
    right; ties keep the slide's stacking order).

    A placeholder without a position of its own stands where its layout's placeholder of
    the same idx does, which may stand where its master's placeholder of that kind does.
    python-pptx's ``shape.top`` looks both up by scanning the layout and the master for
    every such placeholder: quadratic, a crafted 40 KB slide took two minutes. Here each
    layout and master is indexed once per deck.
    """

    def __init__(self) -> None:
        self._layouts: dict[str, dict[int, _Point]] = {}
        self._masters: dict[str, dict[PP_PLACEHOLDER, _Point]] = {}

    def on(self, slide: Slide) -> Callable[[BaseShape], _Point]:
        inherited = self._layout(slide)

        def position(shape: BaseShape) -> _Point:
            own = _own_position(shape)
            if own is not None or not shape.is_placeholder:
                return own or _NOWHERE
            return inherited.get(shape.placeholder_format.idx, _NOWHERE)

        return position

    def _layout(self, slide: Slide) -> dict[int, _Point]:
        try:
            layout = slide.slide_layout
        except KeyError:  # a slide without a layout (PowerPoint repairs it): nothing to inherit
            return {}
        name = str(layout.part.partname)
        if name not in self._layouts:
            master = self._master(layout.slide_master)
            index: dict[int, _Point] = {}
            for shape in _each(layout.placeholders):
                ph = shape.placeholder_format
                kind = _MASTER_KIND.get(ph.type, PP_PLACEHOLDER.BODY)
                where = _own_position(shape) or master.get(kind)
                if where is not None:
                    index.setdefault(ph.idx, where)  # the first of an idx, as python-pptx
            self._layouts[name] = index
        return self._layouts[name]

    def _master(self, master: SlideMaster) -> dict[PP_PLACEHOLDER, _Point]:
        name = str(master.part.partname)
        if name not in self._masters:
            index: dict[PP_PLACEHOLDER, _Point] = {}
            for shape in _each(master.placeholders):
                where = _own_position(shape)
                if where is not None:
                    index.setdefault(shape.placeholder_format.type, where)
            self._masters[name] = index
        return self._masters[name]


def _each(placeholders: Any) -> Iterator[BaseShape]:
    # python-pptx types these collections' __iter__ as a class attribute mypy will not call.
    yield from placeholders


def _own_position(shape: BaseShape) -> _Point | None:
    # The element's own offset: a placeholder's shape.top would search its layout for one.
    top, left = shape.element.y, shape.element.x
    return None if top is None or left is None else (int(top), int(left))


def _shape_blocks(shape: BaseShape, caption: str) -> list[Block]:
    if isinstance(shape, GroupShape):  # children are placed in the group's own coordinates
        children = sorted(shape.shapes, key=lambda child: _own_position(child) or _NOWHERE)
        return [block for child in children for block in _shape_blocks(child, caption)]
    if shape.has_text_frame:
        return _frame_blocks(_text_frame(shape))
    if shape.has_table:
        return _table_blocks(_table(shape), caption)
    return []  # pictures, charts, SmartArt, media, OLE objects, connectors


def _text_frame(shape: Any) -> TextFrame:
    frame: TextFrame = shape.text_frame  # BaseShape does not declare it; has_text_frame did
    return frame


def _table(shape: Any) -> Table:
    table: Table = shape.table
    return table


def _frame_blocks(frame: TextFrame) -> list[Block]:
    lines = [line for line in (_one_line(p.text) for p in frame.paragraphs) if line]
    if not lines:
        return []
    if sum(len(line) for line in lines) <= KEEP_TOGETHER_CHARS:
        return [Block("\n".join(lines))]
    return [Block(line) for line in lines]


def _one_line(text: str) -> str:
    # python-pptx writes a soft line break as a vertical tab, which clean_text would delete.
    return " ".join(clean_text(text.replace("\v", " ")).split())


def _table_blocks(table: Table, caption: str) -> list[Block]:
    texts, hints = _cells(table)
    # PowerPoint sets the header-row flag on every table it inserts and styles that row as
    # the header; cells merged under it (a "Region" over two rows, a "2025" over its
    # quarters) make the header longer (tables.split_header). Without the flag, it guesses.
    return grid_blocks(texts, hints, caption=caption, marked=int(table.first_row))


def _cells(table: Table) -> tuple[list[list[str]], list[list[Hint]]]:
    """The cells' text, a merged cell's in its first cell, the cells it covers empty and
    marked as covered from the left or from above; ``tables.grid_blocks`` spreads the
    merged text into them in one pass, however large or overlapping the spans a crafted
    table declares."""
    texts: list[list[str]] = []
    hints: list[list[Hint]] = []
    for row in table.rows:
        texts.append([])
        hints.append([])
        for cell in row.cells:
            tc = cell._tc  # python-pptx says whether a cell is covered, not from which side
            across = Hint.ACROSS if tc.hMerge else Hint.NONE
            hint = across | (Hint.BELOW if tc.vMerge else Hint.NONE)
            texts[-1].append("" if hint else _one_line(cell.text))
            hints[-1].append(hint)
    return texts, hints


def _notes_blocks(slide: Slide) -> list[Block]:
    if not slide.has_notes_slide:  # reading notes_slide would create one
        return []
    frame = slide.notes_slide.notes_text_frame
    if frame is None:
        return []
    lines = [line for line in (_one_line(p.text) for p in frame.paragraphs) if line]
    return [Block("Notes: " + "\n".join(lines))] if lines else []


def _document_title(deck: Presentation, pages: tuple[ParsedPage, ...], fallback: str) -> str:
    title = named_title(deck.core_properties.title or "")
    if title and title.casefold() not in _PLACEHOLDER_TITLES:
        return title
    first = pages[0].blocks[0] if pages and pages[0].blocks else None
    is_title = first is not None and first.is_heading and first.table is None  # not a header
    return first.text if first is not None and is_title else fallback
