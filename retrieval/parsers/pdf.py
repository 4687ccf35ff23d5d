"""PDF text by page, through pypdf. Encrypted files fail unless the password is empty.

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
from retrieval.parsers.text import clean_text, paragraphs
from retrieval.types import Block, ParsedDocument, ParsedPage

MAX_PAGES = 5000


def parse_pdf(data: bytes, fallback_title: str) -> ParsedDocument:
    try:
        return _parse_pdf(data, fallback_title)
    except DependencyError as exc:  # AES streams are decrypted lazily, page by page
        raise ParseError(_CANNOT_DECRYPT) from exc


_CANNOT_DECRYPT = (
    "the PDF is encrypted with AES and this server cannot decrypt it "
    "(the cryptography package is missing); upload an unprotected copy"
)


def _parse_pdf(data: bytes, fallback_title: str) -> ParsedDocument:
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
    return ParsedDocument(title=_title(reader) or fallback_title, pages=tuple(pages))


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


def _title(reader: PdfReader) -> str | None:
    try:
        title = reader.metadata.title if reader.metadata else None
    except Exception:  # metadata of a broken file is optional
        return None
    return " ".join(str(title).split()) or None if title else None
