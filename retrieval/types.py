"""Plain values passed between the retrieval modules."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class DocumentStatus(StrEnum):
    QUEUED = "queued"
    PARSING = "parsing"
    EMBEDDING = "embedding"
    INDEXED = "indexed"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        return self in (DocumentStatus.INDEXED, DocumentStatus.FAILED)


class DocumentKind(StrEnum):
    PDF = "pdf"
    DOCX = "docx"
    HTML = "html"
    MARKDOWN = "markdown"
    TEXT = "text"
    CSV = "csv"
    PPTX = "pptx"
    XLSX = "xlsx"
    ODT = "odt"
    ODS = "ods"
    ODP = "odp"
    RTF = "rtf"
    EPUB = "epub"
    EML = "eml"
    MSG = "msg"
    MBOX = "mbox"
    IMAGE = "image"


# Where a passage stands on its PDF page: x0, y0, x1, y1 as fractions of the page's width
# and height from its top-left corner (retrieval/parsers/page_boxes.py).
Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Block:
    """A structural unit of a page: a heading, a paragraph-like run of text, or a table row.

    A table row is written as a Markdown row (``| Silver | 500 | 30 |``) and carries its
    table's ``table`` context: the caption or nearest heading and the header row, as
    Markdown (``retrieval/parsers/tables.py``). Rows with the same context are one table;
    every passage cut from it carries that context, so a row never loses its header. A
    block with a ``table`` that ``is_heading`` is that table's header row: shown on the
    page, carried by the passages rather than cut into one.
    """

    text: str
    is_heading: bool = False
    table: str | None = None


@dataclass(frozen=True)
class ParsedPage:
    """One locatable part of a document: a page, a slide, a sheet, a message, a chapter.

    ``label`` names it for people where "page n" would not ("Slide 3", "Sheet Prices",
    "Message 2: Re: budget"); empty means "Page n". ``regions`` say where text read from
    an image (OCR) stands on it: (start, end, box) with ``[start, end)`` a slice of the
    page's text and the box as fractions of the image (see ``Box`` below), so a passage
    is highlighted on the picture without searching a text layer.
    """

    number: int
    blocks: tuple[Block, ...]
    label: str = ""
    regions: tuple[tuple[int, int, Box], ...] = ()

    @property
    def text(self) -> str:
        return PAGE_BLOCK_SEPARATOR.join(block.text for block in self.blocks)


PAGE_BLOCK_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class ParsedDocument:
    title: str
    pages: tuple[ParsedPage, ...] = field(default_factory=tuple)
    # What the parse left out of a document that is still indexed (OCR that ran out of
    # time), in words for the people who look at it; kept as the document's note.
    warnings: tuple[str, ...] = ()


def as_boxes(items: Iterable[Sequence[float]]) -> tuple[Box, ...]:
    """Boxes from what JSON gives back (lists of four numbers)."""
    return tuple((float(b[0]), float(b[1]), float(b[2]), float(b[3])) for b in items)


@dataclass(frozen=True)
class ChunkSpan:
    """A chunk as a slice ``[start, end)`` of its page's text (and, in a PDF, the boxes it
    covers on the page)."""

    page: int
    start: int
    end: int
    text: str
    heading: str | None
    boxes: tuple[Box, ...] = ()
    table: str | None = None  # the table context of a passage of table rows (see Block)


@dataclass(frozen=True)
class Hit:
    chunk_id: int
    document_id: int
    title: str
    page: int
    start: int
    end: int
    text: str
    score: float
    boxes: tuple[Box, ...] = ()  # on its PDF page; none for other kinds, or not found
    table: str | None = None  # a passage of table rows: its caption and header (Markdown)
    label: str = ""  # its page's name when not "Page n" ("Slide 3", "Sheet “Prices”")

    @property
    def reading(self) -> str:
        """What a reader (the model, the Sources pane) is shown: a passage of table rows
        under its table's caption and header, so each row says what its values are."""
        return f"{self.table}\n{self.text}" if self.table else self.text
