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


@dataclass(frozen=True)
class Block:
    """A structural unit of a page: a heading or a paragraph-like run of text."""

    text: str
    is_heading: bool = False


@dataclass(frozen=True)
class ParsedPage:
    number: int
    blocks: tuple[Block, ...]

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


# Where a passage stands on its PDF page: x0, y0, x1, y1 as fractions of the page's width
# and height from its top-left corner (retrieval/parsers/page_boxes.py).
Box = tuple[float, float, float, float]


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
