"""Turn uploaded bytes into pages of structural blocks, whatever the format.

``detect_kind`` decides the format from the content first (PDF and DOCX have signatures)
and the filename second (text formats have none: a ``.svg``, a shell script or a file
without an extension is text too, but not a type we index, so it is refused);
``parse_document`` never raises anything but :class:`ParseError`, whose message is shown
to the user as the document's failure reason.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable
from pathlib import PurePath

from retrieval.parsers.docx import parse_docx
from retrieval.parsers.errors import ParseError, UnsupportedDocumentType
from retrieval.parsers.html import parse_html
from retrieval.parsers.ocr import OcrOptions
from retrieval.parsers.pdf import parse_pdf
from retrieval.parsers.text import decode_text, parse_csv, parse_markdown, parse_plain_text
from retrieval.types import DocumentKind, ParsedDocument

__all__ = [
    "ACCEPTED_TYPES",
    "SUPPORTED_EXTENSIONS",
    "OcrOptions",
    "ParseError",
    "UnsupportedDocumentType",
    "detect_kind",
    "parse_document",
]

_EXTENSIONS: dict[str, DocumentKind] = {
    ".pdf": DocumentKind.PDF,
    ".docx": DocumentKind.DOCX,
    ".html": DocumentKind.HTML,
    ".htm": DocumentKind.HTML,
    ".xhtml": DocumentKind.HTML,
    ".md": DocumentKind.MARKDOWN,
    ".markdown": DocumentKind.MARKDOWN,
    ".txt": DocumentKind.TEXT,
    ".text": DocumentKind.TEXT,
    ".csv": DocumentKind.CSV,
}
SUPPORTED_EXTENSIONS = frozenset(_EXTENSIONS)
ACCEPTED_TYPES = f"PDF, DOCX, HTML, Markdown, plain text or CSV ({' '.join(_EXTENSIONS)})"
_SNIFF_BYTES = 8192
_PLAIN_SUFFIX = re.compile(r"\.[a-z0-9_-]{1,15}")


def detect_kind(data: bytes, filename: str) -> DocumentKind:
    """Format of an upload, judged by its bytes and then its extension.

    Raises :class:`UnsupportedDocumentType` (the API answers 415) for content that is
    neither PDF nor DOCX under a name without a supported extension, for content named
    .pdf or .docx that is not one (HTML, SVG, a program), and for binary content behind a
    text extension. A real PDF or DOCX that is damaged is accepted here and fails in
    parsing with a reason.
    """
    claimed = _EXTENSIONS.get(PurePath(filename).suffix.lower())
    head = data[:_SNIFF_BYTES]
    # PDF readers accept the header anywhere in the first KiB; we do when the name says PDF.
    if head.lstrip().startswith(b"%PDF-") or (
        claimed is DocumentKind.PDF and b"%PDF-" in head[:1024]
    ):
        return DocumentKind.PDF
    if head.startswith(b"PK\x03\x04"):
        if claimed is DocumentKind.DOCX or _is_docx_zip(data):
            return DocumentKind.DOCX
        raise _unsupported("ZIP archives other than DOCX are not supported")
    if claimed is DocumentKind.PDF:  # HTML, SVG, a program ... named .pdf
        raise _unsupported("this file is named .pdf but is not a PDF (no PDF header)")
    if claimed is DocumentKind.DOCX:
        raise _unsupported("this file is named .docx but is not a DOCX (not a ZIP archive)")
    if _looks_binary(head):
        raise _unsupported("binary file of an unsupported type")
    if claimed is None:  # text, but of a type we do not index (SVG, a script, a log, ...)
        raise _unsupported(f"{_files_named(filename)} not a supported type")
    return claimed


def _files_named(filename: str) -> str:
    suffix = PurePath(filename).suffix.lower()
    if not suffix:
        return "files without an extension are"
    # Quoted only when plain: a user's suffix may hold direction controls or markup.
    return f"'{suffix}' files are" if _PLAIN_SUFFIX.fullmatch(suffix) else "files of this type are"


def _unsupported(reason: str) -> UnsupportedDocumentType:
    return UnsupportedDocumentType(f"{reason}; accepted: {ACCEPTED_TYPES}")


def _is_docx_zip(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return "word/document.xml" in archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def _looks_binary(head: bytes) -> bool:
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False  # UTF-16 with a byte-order mark
    return b"\x00" in head


def parse_document(
    data: bytes, kind: DocumentKind, filename: str, *, ocr: OcrOptions | None = None
) -> ParsedDocument:
    """Parse ``data`` as ``kind``; any failure becomes a :class:`ParseError` with a reason.

    With ``ocr``, scanned PDF pages are read by OCR; without, they have no text.
    """
    if not data.strip():
        raise ParseError("the file is empty")
    fallback_title = PurePath(filename).stem or "Untitled"
    try:
        if kind is DocumentKind.PDF:
            document = parse_pdf(data, fallback_title, ocr)
        else:
            document = _PARSERS[kind](data, fallback_title)
    except ParseError:
        raise
    except RecursionError:
        raise ParseError("the document is nested too deeply to parse") from None
    except Exception as exc:  # a parser library failed on hostile or broken input
        raise ParseError(
            f"could not read this {kind.value.upper()} file ({type(exc).__name__})"
        ) from exc
    if not any(page.blocks for page in document.pages):
        raise ParseError(f"no text could be extracted{_no_text_why(kind, ocr)}")
    return document


def _no_text_why(kind: DocumentKind, ocr: OcrOptions | None) -> str:
    if kind is not DocumentKind.PDF:
        return ""
    return ", not even by OCR" if ocr is not None else " (OCR of scanned pages is off)"


def _parse_text_kind(
    parse: Callable[[str, str], ParsedDocument],
) -> Callable[[bytes, str], ParsedDocument]:
    def parse_bytes(data: bytes, fallback_title: str) -> ParsedDocument:
        return parse(decode_text(data), fallback_title)

    return parse_bytes


_PARSERS: dict[DocumentKind, Callable[[bytes, str], ParsedDocument]] = {
    DocumentKind.PDF: parse_pdf,
    DocumentKind.DOCX: parse_docx,
    DocumentKind.HTML: _parse_text_kind(parse_html),
    DocumentKind.MARKDOWN: _parse_text_kind(parse_markdown),
    DocumentKind.TEXT: _parse_text_kind(parse_plain_text),
    DocumentKind.CSV: _parse_text_kind(parse_csv),
}
