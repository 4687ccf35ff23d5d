"""PDF text by page, through pypdf. Encrypted files fail unless the password is empty.

pypdf (BSD) reads the text layer fast and decrypts; pages with ruled tables are read
again by pdfplumber (``pdf_tables.py``) so that their tables become rows under a header
instead of cells run together into sentences.

Pages without a usable text layer (scanned) are read by OCR when ``ocr`` is given
(``ocr.py``); their text replaces the layer's, page by page.

AES-encrypted files (most of them, since Acrobat 7) need the ``cryptography`` package,
a declared dependency; without it pypdf raises DependencyError, reported as a reason.
"""

from __future__ import annotations

import io

from pypdf import PdfReader
from pypdf.errors import (
    DependencyError,
    FileNotDecryptedError,
    LimitReachedError,
    PdfReadError,
)

from retrieval.parsers.errors import ParseError
from retrieval.parsers.ocr import (
    OcrOptions,
    budget_warning,
    keep_text_layer,
    needs_ocr,
    recognise_pages,
)
from retrieval.parsers.pdf_tables import page_tables
from retrieval.parsers.text import clean_text, paragraphs
from retrieval.parsers.titles import named_title
from retrieval.types import Block, ParsedDocument, ParsedPage

MAX_PAGES = 5000


def parse_pdf(data: bytes, fallback_title: str, ocr: OcrOptions | None = None) -> ParsedDocument:
    try:
        return _parse_pdf(data, fallback_title, ocr)
    except DependencyError as exc:  # AES streams are decrypted lazily, page by page
        raise ParseError(_CANNOT_DECRYPT) from exc


_CANNOT_DECRYPT = (
    "the PDF is encrypted with AES and this server cannot decrypt it "
    "(the cryptography package is missing); upload an unprotected copy"
)


def _parse_pdf(data: bytes, fallback_title: str, ocr: OcrOptions | None) -> ParsedDocument:
    try:
        reader = PdfReader(io.BytesIO(data))
    except PdfReadError as exc:
        raise ParseError(f"not a readable PDF ({exc})") from exc
    if reader.is_encrypted:
        _decrypt_or_fail(reader)
    if len(reader.pages) > MAX_PAGES:
        raise ParseError(f"the PDF has more than {MAX_PAGES} pages")
    pages = []
    try:
        for number, page in enumerate(reader.pages, start=1):
            text = clean_text(page.extract_text() or "")
            pages.append(ParsedPage(number=number, blocks=tuple(_pdf_paragraphs(text))))
    except LimitReachedError as exc:  # pypdf caps decompressed stream sizes
        raise ParseError("the PDF expands to an implausible size (decompression bomb?)") from exc
    pages = _with_tables(data, pages)
    warnings: tuple[str, ...] = ()
    if ocr is not None:
        pages, warnings = _with_scanned_pages_read(data, pages, ocr)
    title = _title(reader) or fallback_title
    return ParsedDocument(title=title, pages=tuple(pages), warnings=warnings)


def _with_tables(data: bytes, pages: list[ParsedPage]) -> list[ParsedPage]:
    """The pages, those with ruled tables as pdfplumber reads them (text and tables in
    page order). Pages OCR will read (no text layer, glyph soup) are not looked at."""
    read = page_tables(data, {p.number: p.text for p in pages if not needs_ocr(p.text)})
    return [
        ParsedPage(page.number, read[page.number]) if page.number in read else page
        for page in pages
    ]


def _with_scanned_pages_read(
    data: bytes, pages: list[ParsedPage], ocr: OcrOptions
) -> tuple[list[ParsedPage], tuple[str, ...]]:
    """The pages, scanned ones as OCR read them; and a warning when OCR ran out of time
    before the last (those it did not reach keep what their text layer holds, if not soup)."""
    scanned = [page.number for page in pages if needs_ocr(page.text)]
    if not scanned:
        return pages, ()
    read = recognise_pages(data, scanned, ocr)
    skipped = [number for number in scanned if number not in read]
    looked_at = set(scanned)
    pages = [
        ParsedPage(page.number, read.get(page.number) or keep_text_layer(page.blocks))
        if page.number in looked_at
        else page
        for page in pages
    ]
    return pages, (budget_warning(skipped, len(scanned), ocr),) if skipped else ()


def _decrypt_or_fail(reader: PdfReader) -> None:
    """Many PDFs are 'encrypted' with an empty user password; those open fine."""
    try:
        opened = reader.decrypt("")
    except (FileNotDecryptedError, NotImplementedError, PdfReadError) as exc:
        raise ParseError("the PDF is encrypted; upload an unprotected copy") from exc
    if not opened:
        raise ParseError("the PDF is encrypted with a password; upload an unprotected copy")


def _pdf_paragraphs(text: str) -> list[Block]:
    # pypdf separates lines with \n; the lines of one paragraph are joined with spaces.
    return [Block(" ".join(block.text.split())) for block in paragraphs(text)]


# Titles that name no document: what producers write when nobody typed one, prefixes they
# add ("Microsoft Word - policy.docx"), and the file names some put there instead (the
# file converted to PDF: "policy.html"). The uploaded file's name is better than any of them.
def _title(reader: PdfReader) -> str | None:
    """The metadata title, unless it names no document (empty, a producer's placeholder,
    another file's name): then None, and the uploaded file's name is used."""
    try:
        title = reader.metadata.title if reader.metadata else None
    except Exception:  # metadata of a broken file is optional
        return None
    return named_title(str(title or ""))
