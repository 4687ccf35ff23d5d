"""Scanned PDF pages: render them (PDFium) and recognise their text (RapidOCR, ONNX Runtime).

A page is read by OCR when its text layer is missing (almost no characters) or is glyph
soup, as a broken font encoding or bad scanner software leaves it; pages with a real text
layer are never rendered, so normal PDFs cost nothing more. The recognised lines become
the page's blocks, in reading order, so the page keeps its number and its text is what
the document viewer shows and highlights by character offsets, as for any other page.
``read_image`` is the recognition itself, for any grey image (a rendered page, an uploaded
picture: ``image.py``); it also says where each line stands on the image, as a fraction of
its size, so a passage read from a picture is boxed on it without a text layer.

The models are the ones inside the installed ``rapidocr`` wheel, named by path: RapidOCR
downloads a model only when none is given and its own copy is missing, and it never gets
that far here (tests run the recognition with sockets refused). This runs inside the
sandboxed parser child, under its time and memory limits.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import statistics
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrieval.parsers.errors import ParseError
from retrieval.types import PAGE_BLOCK_SEPARATOR, Block, Box

# A page whose text layer has fewer visible characters than this is treated as scanned.
MIN_TEXT_CHARS = 16
MAX_RENDER_PIXELS = 16_000_000  # a hostile page size renders smaller, not bigger
# Address space the parser child needs with the models loaded (measured peak 1.1-1.5 GiB;
# ONNX Runtime fails to load them under a 1 GiB cap).
OCR_MEMORY_MB = 1536
_INK_LEVEL = 128  # grey level below which a rendered pixel is ink
_MIN_INK_SHARE = 0.0005  # below this the page is blank: nothing to recognise
_SAMPLE_CHARS = 1500


@dataclass(frozen=True)
class OcrOptions:
    """How scanned pages are read; ``parse_document(..., ocr=None)`` reads none.

    ``before_ocr`` is called with the number of pages about to be recognised, before the
    first: the sandbox child uses it to ask the server for the extra time they take
    (``time_for``, ``isolated.py``).

    ``document_budget_s`` bounds the OCR of one document: once it is spent, the pages not
    read yet are skipped (the document keeps the pages read, with a warning), so a long
    scan cannot hold a parser process for hours.
    """

    dpi: int = 150
    threads: int = 1
    max_pages: int = 300
    page_timeout_s: float = 60.0
    document_budget_s: float = 1800.0
    before_ocr: Callable[[int], None] | None = field(default=None, compare=False)

    def time_for(self, pages: int) -> float:
        """The most time reading ``pages`` scanned pages may take: ``page_timeout_s`` each,
        but no more than the budget plus the one page that may start just before it ends."""
        pages = min(max(0, pages), self.max_pages)
        return min(pages * self.page_timeout_s, self.document_budget_s + self.page_timeout_s)


def needs_ocr(text: str) -> bool:
    """Whether a page with this text layer must be read from its image instead."""
    return len("".join(text.split())) < MIN_TEXT_CHARS or is_glyph_soup(text)


def keep_text_layer(blocks: tuple[Block, ...]) -> tuple[Block, ...]:
    """What a page keeps when OCR read nothing on it: its few characters, not soup."""
    return () if is_glyph_soup(" ".join(block.text for block in blocks)) else blocks


def is_glyph_soup(text: str) -> bool:
    """Text no reader could use: mostly symbols, private-use or unassigned code points, or
    (in Latin script) 'words' without vowels. Conservative: real text in any script, with
    numbers, tables and formulas, stays well under these bars. Judges the page's first
    characters (soup is soup throughout): a page of text costs about 0.1 ms."""
    text = text[:_SAMPLE_CHARS]
    visible = _visible(text)
    total = visible.total()
    if not total:
        return False
    odd = sum(n for c, n in visible.items() if _is_odd(c))
    if odd > 0.3 * total:
        return True
    letters = sum(n for c, n in visible.items() if c.isalpha())
    if letters < 0.4 * total:
        has_digits = any(c.isdigit() for c in visible)
        return not has_digits or odd > 0.15 * total
    latin = sum(n for c, n in visible.items() if c.isascii() and c.isalpha())
    if latin < 0.8 * letters:
        return False  # another script: no vowel test
    words = _LATIN_WORD.findall(text)
    if len(words) < 5:
        return False
    voiceless = sum(1 for word in words if _NO_VOWEL.fullmatch(word))
    return voiceless > 0.4 * len(words)


_LATIN_WORD = re.compile(r"(?<![^\W\d_])[A-Za-z]{4,}(?![^\W\d_])")  # whole words only
_NO_VOWEL = re.compile(r"[^aeiouyAEIOUY]+")


def _is_odd(char: str) -> bool:
    if char == "\ufffd" or unicodedata.category(char) in ("Co", "Cn", "Cs", "Cc", "So", "Sk"):
        return True
    # Latin-1 symbols that a wrong encoding turns letters into; text uses them rarely.
    return char in "¤¦§¨©ª«¬®¯°±²³´µ¶·¸¹º»¼½¾¿×÷"


def _visible(text: str) -> Counter[str]:
    counts = Counter(text)
    for char in [c for c in counts if c.isspace()]:
        del counts[char]
    return counts


def recognise_pages(
    data: bytes, numbers: Sequence[int], options: OcrOptions
) -> dict[int, tuple[Block, ...]]:
    """The blocks OCR reads on pages ``numbers`` (1-based, ascending) of the PDF ``data``;
    those it did not reach within ``options.document_budget_s`` are missing."""
    if len(numbers) > options.max_pages:
        raise ParseError(
            f"the PDF has {len(numbers)} scanned pages; OCR reads at most "
            f"{options.max_pages} per document (RAGDESK_OCR_MAX_PAGES)"
        )
    import pypdfium2

    if options.before_ocr is not None:
        options.before_ocr(len(numbers))
    document = pypdfium2.PdfDocument(data)
    read: dict[int, tuple[Block, ...]] = {}
    started = time.monotonic()
    try:
        for number in numbers:
            if read and time.monotonic() - started >= options.document_budget_s:
                break  # the rest are skipped (``budget_warning``); the first is always read
            read[number] = _read_page(document[number - 1], options)
    finally:
        document.close()
    return read


def budget_warning(skipped: Sequence[int], scanned: int, options: OcrOptions) -> str:
    """Why pages ``skipped`` (in order) of the ``scanned`` have no text."""
    return (
        f"OCR stopped at its time budget ({options.document_budget_s:g} s per document, "
        f"RAGDESK_OCR_DOCUMENT_BUDGET_S): {len(skipped)} of {scanned} scanned pages, from "
        f"page {skipped[0]} on, were not read and have no text"
    )


def _read_page(page: Any, options: OcrOptions) -> tuple[Block, ...]:
    import pypdfium2.raw

    images = page.get_objects(filter=(pypdfium2.raw.FPDF_PAGEOBJ_IMAGE,), max_depth=4)
    if next(images, None) is None:
        return ()  # a title or divider page with a short text layer: no scan on it
    width, height = page.get_size()
    scale = options.dpi / 72
    scale = min(scale, math.sqrt(MAX_RENDER_PIXELS / max(1.0, width * height)))
    image = page.render(scale=scale, grayscale=True).to_numpy()
    if image.ndim == 3:
        image = image[..., 0]
    return read_image(image, options.threads).blocks


Region = tuple[int, int, Box]  # [start, end) of the page's text, and where it stands


@dataclass(frozen=True)
class Reading:
    """What OCR read on one image: its paragraphs as blocks, and a region per line (its
    slice of the blocks joined as ``ParsedPage.text`` joins them, and its box)."""

    blocks: tuple[Block, ...] = ()
    regions: tuple[Region, ...] = ()


def read_image(image: Any, threads: int) -> Reading:
    """The text of a grey-scale image (a 2-D uint8 array, dark ink on a light ground)."""
    import numpy

    if (image < _INK_LEVEL).mean() < _MIN_INK_SHARE:
        return Reading()  # blank: nothing to recognise
    result = _recognise(numpy.stack([image] * 3, axis=-1), threads)
    if result.boxes is None:
        return Reading()
    lines = [_Line.of(box, str(text)) for box, text in zip(result.boxes, result.txts, strict=True)]
    height, width = image.shape[:2]
    return _reading(_paragraph_lines([line for line in lines if line.text]), width, height)


def _reading(groups: list[list[_Line]], width: int, height: int) -> Reading:
    blocks: list[Block] = []
    regions: list[Region] = []
    offset = 0
    for group in groups:
        if blocks:
            offset += len(PAGE_BLOCK_SEPARATOR)
        for index, line in enumerate(group):
            offset += 1 if index else 0  # the space that joins it to the line before
            regions.append((offset, offset + len(line.text), line.fraction_of(width, height)))
            offset += len(line.text)
        blocks.append(Block(" ".join(line.text for line in group)))
    return Reading(tuple(blocks), tuple(regions))


@dataclass(frozen=True)
class _Line:
    """One recognised line: its text and where it sits (pixels, y grows downwards);
    ``bounds`` is the rectangle around all four corners (x0, y0, x1, y1)."""

    text: str
    left: float
    top: float
    bottom: float
    bounds: Box = (0.0, 0.0, 0.0, 0.0)

    @property
    def middle(self) -> float:
        return (self.top + self.bottom) / 2

    @classmethod
    def of(cls, box: Any, text: str) -> _Line:
        # The left edge (corners 0 and 3): on a skewed scan the lines of a paragraph start
        # at one margin, while their right ends rise or fall with their length.
        (left, top), (_, bottom) = (float(box[0][0]), float(box[0][1])), box[3]
        xs, ys = [float(corner[0]) for corner in box], [float(corner[1]) for corner in box]
        bounds = (min(xs), min(ys), max(xs), max(ys))
        return cls(" ".join(text.split()), left, top, float(bottom), bounds)

    def fraction_of(self, width: int, height: int) -> Box:
        x0, y0, x1, y1 = self.bounds
        return (
            _fraction(x0, width),
            _fraction(y0, height),
            _fraction(x1, width),
            _fraction(y1, height),
        )


def _fraction(value: float, whole: int) -> float:
    return round(min(1.0, max(0.0, value / whole)), 5) if whole > 0 else 0.0


def paragraphs(lines: Sequence[_Line]) -> list[str]:
    """Lines in reading order, joined into paragraphs (see ``_paragraph_lines``)."""
    return [" ".join(line.text for line in group) for group in _paragraph_lines(lines)]


def _paragraph_lines(lines: Sequence[_Line]) -> list[list[_Line]]:
    """Lines in reading order, grouped into paragraphs: pieces of one row go left to right,
    and a row starts a new paragraph when the blank above it is wide for the page: over
    0.3 line heights, and twice the usual blank between lines of a paragraph."""
    rows: list[list[_Line]] = []
    for line in sorted(lines, key=lambda line: line.middle):
        row = rows[-1] if rows else None
        if row and abs(line.middle - row[0].middle) < 0.5 * (row[0].bottom - row[0].top):
            row.append(line)
        else:
            rows.append([line])
    if not rows:
        return []
    height = statistics.median(line.bottom - line.top for line in lines)
    blanks = [
        min(line.top for line in below) - max(line.bottom for line in above)
        for above, below in itertools.pairwise(rows)
    ]
    usual = sorted(blanks)[len(blanks) // 4] if blanks else 0.0  # most blanks are in-paragraph
    wide = max(0.3 * height, 2 * usual)
    groups: list[list[_Line]] = [[]]
    for index, row in enumerate(rows):
        if index and blanks[index - 1] > wide:
            groups.append([])
        groups[-1].extend(sorted(row, key=lambda x: x.left))
    return groups


def _recognise(image: Any, threads: int) -> Any:
    try:
        return _engine(threads)(image)
    except Exception as exc:  # mostly ONNX Runtime failing to allocate under a low cap
        raise ParseError(
            f"OCR failed ({type(exc).__name__}); its models need a parser memory cap "
            f"(RAGDESK_PARSE_MEMORY_MB) of {OCR_MEMORY_MB} or more"
        ) from exc


@functools.cache
def _engine(threads: int) -> Any:
    """RapidOCR with the models of the installed wheel, loaded once per process."""
    import cv2
    import rapidocr

    cv2.setNumThreads(threads)  # OpenCV's pre- and post-processing, like ONNX Runtime's
    models = Path(rapidocr.__file__).parent / "models"
    onnx = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
    return rapidocr.RapidOCR(
        params={
            "Global.use_cls": False,  # upright scans; the orientation model costs time
            "Global.log_level": "error",
            # Lines are found on the page scaled to 1024 pixels: ~10 times faster than at
            # 150 dpi, and as accurate for body text; lines are read at full resolution.
            "Det.limit_type": "max",
            "Det.limit_side_len": 1024,
            "Det.model_path": str(models / "PP-OCRv6_det_small.onnx"),
            "Rec.model_path": str(models / "PP-OCRv6_rec_small.onnx"),
            **{f"EngineConfig.onnxruntime.{key}": value for key, value in onnx.items()},
        }
    )
